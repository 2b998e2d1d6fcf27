"""A manifest file whose ``name:`` changes is a rename, not a delete and a create.

The file at one path declared ``old`` when it was last applied and declares ``new`` now: the old
deployment is held on its last applied spec (serving, its gateway the endpoint) while the new one
comes up; once the new one is Ready its gateway takes the old one's address (both listen on it for
a moment, SO_REUSEPORT); once the new gateway serves there the old gateway is stopped (what it
carries finishes on the old deployment, which still runs), and once that master is gone the old
deployment is let go — a normal delete of a recipe no file declares. Pure: the shell reads the facts (``state/renames.json``,
``files.json``, the new deployment's status and gateway record) and acts on the step.

A file that cannot be read keeps the rename where it is (the old one serves on). A file renamed
back to ``old`` ends the rename (the new one is deleted); renamed to a third name, the old one keeps
the endpoint and the third takes over from it. A sweep / override file (several deployments) has
no renames: its names are the swept values (docs/recipes.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from enum import Enum

from reconciler.recipe import namespaces


class Step(str, Enum):
    STARTING = "Starting"  # the new deployment comes up; the old one serves and holds the endpoint
    HANDING_OVER = "HandingOver"  # the new one is Ready: its gateway takes the old one's address beside it
    RETIRING = "Retiring"  # the new gateway serves there: the old one's stops, its deployment still runs
    RELEASED = "Released"  # the new gateway serves the endpoint (or there is none): the old one goes


@dataclass(frozen=True)
class Rename:
    path: str  # the manifest file
    old: str  # the deployment it was applied as: held until the new one takes over
    new: str  # the deployment it declares now
    since: float  # when the rename was first seen
    step: Step = Step.STARTING

    def doc(self) -> dict:
        return {"old": self.old, "new": self.new, "since": self.since, "step": self.step.value}


STEPS = tuple(s.value for s in Step)


def from_doc(path: str, v: object) -> Rename | str:
    """A rename as recorded in ``state/renames.json`` (which a hand may have edited), or why the
    entry is not one: every field checked, so that one bad entry is set aside, not the pass."""
    if not isinstance(v, dict):
        return f"{type(v).__name__}, not an object"
    old, new = v.get("old"), v.get("new")
    for field, name in (("old", old), ("new", new)):
        if not isinstance(name, str) or not namespaces.fits_state(name):
            return f"{field}: {name!r} is not a deployment name"
    if old == new:
        return f"old and new are both {old!r}: no rename"
    since = v.get("since")
    if isinstance(since, bool) or not isinstance(since, (int, float)) or not math.isfinite(since) or since < 0:
        return f"since: {since!r} is not a time (seconds since the epoch)"
    step = v.get("step")
    if step not in STEPS:
        return f"step: {step!r} is none of {', '.join(STEPS)}"
    return Rename(path, old, new, float(since), Step(step))


def why_not_takeable(old_gateway: dict, host: str) -> str | None:
    """Why the old name's gateway has no address the new name's can take (None: it can): it needs a
    port, on this host (a standby that took over elsewhere, or a renamed host, cannot bind there),
    run as this host's own master (not in a Slurm job: reconcile.gateway.allocation). The one test
    for both the rename's step (``advance``'s ``old_endpoint``) and the take-over (shell/gateway/)."""
    port = old_gateway.get("port")
    if not isinstance(port, int) or isinstance(port, bool):
        return "it has no gateway address"
    if old_gateway.get("mode") == "job":
        return "its gateway runs in a Slurm job (reconcile.gateway.allocation)"
    if old_gateway.get("host") != host:
        return f"its gateway is on {old_gateway.get('host')}, this reconciler on {host}"
    return None


def address_takeable(old_gateway: dict, host: str) -> bool:
    return why_not_takeable(old_gateway, host) is None


def ongoing(path: str, declared: tuple[str, ...] | None, applied: tuple[str, ...], record: Rename | None,
            holdable: frozenset[str], claimed: frozenset[str], now: float) -> Rename | None:
    """The rename the file at ``path`` is in, if any. ``declared``: the deployments the file declares
    now (None: it could not be read this pass); ``applied``: what it declared when last applied
    (files.json; mid-rename, the new name and the old one it holds); ``record``: the rename recorded
    for it (state/renames.json); ``holdable``: the applied names with a last applied spec of their
    own to be held on (not a sweep's variants); ``claimed``: names other files declare.

    The record lost (removed, or set aside as corrupt) mid-rename, files.json still says it: the file
    holds two names, the one it declares and one with a spec of its own (a sweep's are its values),
    which it can only hold because of a rename. The rename is found again from there (its step from
    the facts), never taken for a sweep cut down to one name, which would delete the old one at once."""
    if declared is None:
        return record  # unreadable, or being written: where it was (the old one serves on)
    if len(declared) != 1:
        return None  # a sweep: its names are its values; or no deployment at all
    (new,) = declared
    if record is not None:
        if new == record.new:
            return record
        if new == record.old:
            return None  # renamed back: the old one is the file's again; the new one goes
        # renamed again before the hand-over: the old one still holds the endpoint
        return Rename(path, record.old, new, now) if record.old not in claimed else None
    others = [n for n in applied if n != new]
    if len(others) != 1 or len(applied) - len(others) > 1:
        return None  # an edit of the same name, a new file, or was a sweep: its variants go
    (old,) = others
    if old in claimed or old not in holdable:
        return None  # another file declares it now (it is theirs), or there is no spec to hold it on
    return Rename(path, old, new, now)


def advance(r: Rename, new_ready: bool, new_has_frontend: bool, old_endpoint: bool, new_took_endpoint: bool,
            new_serves_endpoint: bool, old_gateway_runs: bool = False) -> Rename:
    """The rename's step from the facts of this pass. ``new_ready``: the new deployment is Ready
    (its status); ``old_endpoint``: the old one has a gateway whose address can be handed over (on
    this host); ``new_took_endpoint``: the new one's gateway has taken that address (its record);
    ``new_serves_endpoint``: and its master runs there; ``old_gateway_runs``: the old one's master
    still runs (stopped, it finishes what it carries: on the old deployment's frontends)."""
    if new_serves_endpoint:
        step = Step.RETIRING if old_endpoint or old_gateway_runs else Step.RELEASED
    elif new_took_endpoint:
        step = Step.HANDING_OVER  # its gateway is starting there: the old one's still serves
    elif not new_ready:
        step = Step.STARTING
    elif old_endpoint and new_has_frontend:
        step = Step.HANDING_OVER
    else:
        step = Step.RELEASED  # no address to hand over: the old one goes once the new one is Ready
    return r if step is r.step else replace(r, step=step)


def holds_old(r: Rename) -> bool:
    """The old deployment is kept (on its last applied spec) in this step."""
    return r.step is not Step.RELEASED


def old_gateway_stops(r: Rename) -> bool:
    """The old deployment's gateway is stopped in this step (the new one's serves its address)."""
    return r.step is Step.RETIRING


def new_gateway_waits(r: Rename) -> bool:
    """The new deployment's gateway is not started yet: it will take the old one's address."""
    return r.step is Step.STARTING


def new_gateway_takes_over(r: Rename) -> bool:
    """The new deployment's gateway binds the old one's address beside it in this step."""
    return r.step is Step.HANDING_OVER


def new_gateway_shares(r: Rename) -> bool:
    """The new deployment's gateway listens with SO_REUSEPORT in this step (beside the old one, or
    until the old one has stopped)."""
    return r.step in (Step.HANDING_OVER, Step.RETIRING)
