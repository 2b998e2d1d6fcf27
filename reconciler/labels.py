"""Ownership labels on Slurm objects, so that adoption and pruning are safe.

Every object carries the marker ``rcl`` and the *owner*: the identity of one
reconciler (``--instance``, by default derived from its state directory). Two
reconcilers on one cluster, even under one Slurm account and with the same recipe
names, never see each other's objects. Jobs carry marker and owner in their name
*and* their comment; steps in their name (steps have no comment). Recipe names
cannot contain ':' (see the recipe model), so ':' separates fields unambiguously.
Nothing without our marker and owner is ever touched.

Recipe names may be up to 200 characters (sweeps append to srtctl names that are
already 70 long), but slurmdbd keeps job names in a 255-byte column and squeue
users read them: names past ``TAG_MAX`` appear in names as a stable abbreviation
(prefix, '~', hash). The comment always carries the full name, and a step's
abbreviation is resolved through its allocation.

Shadow-engine recovery runs several engines per worker, each relaunched on its own: engine
``k >= 1`` of worker ``<role>_<index>`` is the unit of role ``<role>-e<k>`` (srtctl's
``<role>_<index>_<node>_e<k>``), so its steps are ``rcl:<owner>:<recipe>:<role>-e<k>:<index>:...``.
The step pattern has always accepted that role field, so steps named before engines existed
(engine 0 keeps the bare role) are adopted unchanged. A per-worker service instance is the
unit ``svc-<name>-<role>``, index the worker's (srtctl's ``service_<name>_<role>_<index>_<node>``).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

MARKER = "rcl"
COMMENT_MARKER = "reconciler/v1"
OWNER_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,31}$")

_NAME = r"[A-Za-z0-9][A-Za-z0-9_.~@-]*"  # '@' joins a namespace's folders and the name (reconciler.recipe.namespaces)
TAG_MAX = 48
_JOB = re.compile(rf"^rcl:(?P<owner>[a-z0-9-]+):(?P<recipe>{_NAME}):a(?P<index>\d+)$")
_STEP = re.compile(
    rf"^rcl:(?P<owner>[a-z0-9-]+):(?P<recipe>{_NAME}):(?P<role>[a-z][a-z0-9-]*):(?P<index>\d+)(?P<slot>b?):(?P<rank>\d+):(?P<hash>[0-9a-f]+)$"
)
_COMMENT = re.compile(
    r"\breconciler/v1 owner=(?P<owner>\S+) recipe=(?P<recipe>\S+) alloc=(?P<index>\d+) start=(?P<start>\d+)"
    r" nodes=(?P<count>\d+)(?: gpus=(?P<gpus>\d+))?(?: packed=(?P<packed>[a-z]+:\d+(?:,[a-z]+:\d+)*))?"
)
Packed = tuple[tuple[str, int], ...]  # role -> workers, sorted by role


@dataclass(frozen=True)
class JobLabel:
    recipe: str
    index: int
    start: int
    count: int
    gpus: int | None = None  # GPUs per node it was submitted for (None: a job labelled before this was written)
    packed: Packed | None = None  # the workers per role the file's node ordinals were packed for (None: not written)


@dataclass(frozen=True)
class StepLabel:
    recipe: str
    role: str
    index: int
    rank: int
    spec_hash: str
    slot: int = 0  # which of the unit's two life slots (ports, log files) this step runs in


def default_owner(state_dir: Path) -> str:
    """A stable identity per state directory: restarting with the same --state adopts."""
    return "s" + hashlib.sha256(str(Path(state_dir).absolute()).encode()).hexdigest()[:8]


def check_owner(owner: str) -> str:
    if not OWNER_RE.fullmatch(owner):
        raise ValueError(f"instance name must be 1-32 lowercase letters, digits or '-', found {owner!r}")
    return owner


def recipe_tag(recipe: str) -> str:
    """The recipe as it appears in job and step names: itself, or prefix~hash when long.

    '~' never occurs in a recipe name, so a tag cannot collide with a real name.
    """
    if len(recipe) <= TAG_MAX:
        return recipe
    return recipe[: TAG_MAX - 9] + "~" + hashlib.sha256(recipe.encode()).hexdigest()[:8]


def job_name(owner: str, recipe: str, index: int) -> str:
    return f"{MARKER}:{owner}:{recipe_tag(recipe)}:a{index}"


def gateway_job_name(owner: str, recipe: str) -> str:
    """A gateway's own job (reconcile.gateway.allocation): not an allocation of workers, so
    ``parse_job`` never reads it as one (no ``:a<index>``)."""
    return f"{MARKER}:{owner}:{recipe_tag(recipe)}:gw"


def job_comment(owner: str, recipe: str, index: int, start: int, count: int, gpus: int | None = None,
                packed: Packed = ()) -> str:
    # the GPUs it holds per node, read back as Alloc.gpus (a surge life gets mirror GPUs only where they are held);
    # the counts its layout was packed for, read back as Alloc.packed (desired/baseline.py: an edit that adds
    # workers keeps the running ones where they are)
    tail = f" gpus={gpus}" if gpus is not None else ""
    tail += " packed=" + ",".join(f"{role}:{n}" for role, n in packed) if packed else ""
    return f"{COMMENT_MARKER} owner={owner} recipe={recipe} alloc={index} start={start} nodes={count}{tail}"


def parse_job(name: str, comment: str, owner: str) -> JobLabel | None:
    """Ours only when name and comment both carry the marker and our owner, and agree."""
    n, c = _JOB.match(name or ""), _COMMENT.search(comment or "")
    if not n or not c or n["owner"] != owner or c["owner"] != owner:
        return None
    # a job submitted before names were abbreviated carries the whole name: still ours
    if n["recipe"] not in (recipe_tag(c["recipe"]), c["recipe"]) or n["index"] != c["index"]:
        return None
    packed = tuple(sorted((r, int(k)) for r, _, k in (f.partition(":") for f in c["packed"].split(",")))) \
        if c["packed"] else None
    return JobLabel(c["recipe"], int(n["index"]), int(c["start"]), int(c["count"]),
                    int(c["gpus"]) if c["gpus"] is not None else None, packed)


def step_name(owner: str, recipe: str, role: str, index: int, rank: int, spec_hash: str, slot: int = 0) -> str:
    # slot 0 is written as before ("...:3:0:hash"), so steps labelled by older versions stay ours
    return f"{MARKER}:{owner}:{recipe_tag(recipe)}:{role}:{index}{'b' if slot else ''}:{rank}:{spec_hash}"


def parse_step(name: str, owner: str, recipes: dict[str, str] | None = None) -> StepLabel | None:
    """``recipes`` maps tags to full names (from the allocations observed with the step)."""
    m = _STEP.match(name or "")
    if not m or m["owner"] != owner:
        return None
    recipe = (recipes or {}).get(m["recipe"], m["recipe"])
    if "~" in recipe and recipes is not None:
        # an abbreviation no allocation of this read explains: never guess (it would look deleted)
        return None
    return StepLabel(recipe, m["role"], int(m["index"]), int(m["rank"]), m["hash"], 1 if m["slot"] else 0)


_ENGINE = re.compile(r"^(?P<role>prefill|decode|agg)-e(?P<k>[1-9]\d*)$")


def engine_role(role: str, engine: int) -> str:
    """The unit role of engine ``engine`` of a worker of ``role`` (engine 0 is the worker's own role)."""
    return f"{role}-e{engine}" if engine else role


def split_engine(role: str) -> tuple[str, int]:
    """(worker role, engine) of a unit role: ``agg-e1`` -> (agg, 1), ``agg`` -> (agg, 0)."""
    m = _ENGINE.match(role)
    return (m["role"], int(m["k"])) if m else (role, 0)


def tags(recipes: list[str] | set[str]) -> dict[str, str]:
    return {recipe_tag(r): r for r in recipes}
