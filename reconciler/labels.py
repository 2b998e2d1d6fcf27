"""Ownership labels on Slurm objects, so that adoption and pruning are safe.

Jobs carry the marker in their name *and* their comment; steps carry it in their
name (steps have no comment). Recipe names cannot contain ':' (see the recipe
model), so ':' separates fields unambiguously. Nothing without the marker is
ever touched.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MARKER = "rcl"
COMMENT_MARKER = "reconciler/v1"

_JOB = re.compile(r"^rcl:(?P<recipe>[A-Za-z0-9][A-Za-z0-9_.-]*):a(?P<index>\d+)$")
_STEP = re.compile(
    r"^rcl:(?P<recipe>[A-Za-z0-9][A-Za-z0-9_.-]*):(?P<role>[a-z]+):(?P<index>\d+):(?P<rank>\d+):(?P<hash>[0-9a-f]+)$"
)
_COMMENT = re.compile(r"\breconciler/v1 recipe=(?P<recipe>\S+) alloc=(?P<index>\d+) start=(?P<start>\d+) nodes=(?P<count>\d+)")


@dataclass(frozen=True)
class JobLabel:
    recipe: str
    index: int
    start: int
    count: int


@dataclass(frozen=True)
class StepLabel:
    recipe: str
    role: str
    index: int
    rank: int
    spec_hash: str


def job_name(recipe: str, index: int) -> str:
    return f"{MARKER}:{recipe}:a{index}"


def job_comment(recipe: str, index: int, start: int, count: int) -> str:
    return f"{COMMENT_MARKER} recipe={recipe} alloc={index} start={start} nodes={count}"


def parse_job(name: str, comment: str) -> JobLabel | None:
    """Ours only when both the name and the comment carry the marker and agree."""
    n, c = _JOB.match(name or ""), _COMMENT.search(comment or "")
    if not n or not c or n["recipe"] != c["recipe"] or n["index"] != c["index"]:
        return None
    return JobLabel(n["recipe"], int(n["index"]), int(c["start"]), int(c["count"]))


def step_name(recipe: str, role: str, index: int, rank: int, spec_hash: str) -> str:
    return f"{MARKER}:{recipe}:{role}:{index}:{rank}:{spec_hash}"


def parse_step(name: str) -> StepLabel | None:
    m = _STEP.match(name or "")
    if not m:
        return None
    return StepLabel(m["recipe"], m["role"], int(m["index"]), int(m["rank"]), m["hash"])
