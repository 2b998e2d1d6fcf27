"""The deployments the prune guard holds (every manifest vanished at once: a mis-mounted directory?).

They keep running untouched. So that the operator sees what runs, each is built from its last
applied spec (state/<recipe>/last-applied.yaml) beside the desired state (``Desired.kept``): its
units are probed and its status shows them, its endpoint and its served model, with the reason as a
warning. The plan never converges a kept recipe: nothing is launched, relaunched or cancelled.

``reconciler prune NAME`` confirms one's teardown without restarting `run`: it writes
state/<recipe>/prune.json, which the next pass reads (``Desired.prune_confirmed``); the plan then
tears that one down as it would any deleted recipe. The marker goes once the recipe is deleted, or
when its file comes back (a later mass deletion must be refused again).
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from typing import Any

from reconciler.core.plan import prune_refused
from reconciler.core.ports import NodePortAllocator
from reconciler.desired.admission import load_text
from reconciler.desired.build import build as build_desired
from reconciler.drivers.state import StateDir
from reconciler.recipe import namespaces
from reconciler.recipe.cluster import Cluster
from reconciler.recipe.model import Recipe
from reconciler.timefmt import iso
from reconciler.world import Desired, Observed

MARKER = "prune.json"  # in the recipe's own state directory: no name of state/'s own is taken
REASON = "ManifestMissing"


def confirmed(state: StateDir, names: set[str]) -> frozenset[str]:
    """Those of ``names`` whose teardown `reconciler prune` confirmed."""
    return frozenset(n for n in names if namespaces.fits_state(n) and state.path_of(n, MARKER).is_file())


def confirm(state: StateDir, name: str, teardown: list[str]) -> None:
    """The operator's confirmation, for the running `run` to act on at its next pass."""
    path = state.path_of(name, MARKER)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"at": iso(time.time()), "teardown": teardown}) + "\n")


def clear(state: StateDir, name: str) -> bool:
    """Drop the confirmation (the recipe is gone, or its file is back); whether there was one."""
    try:
        state.path_of(name, MARKER).unlink()
        return True
    except (FileNotFoundError, NotADirectoryError):
        return False


def hold(desired: Desired, observed: Observed, state: StateDir, ports: NodePortAllocator, python: str,
         cluster: Cluster | None, now: float) -> Desired:
    """``desired`` with the operator's confirmations and, while the guard holds, the recipes it
    keeps, built from their last applied spec on a copy of the ports (shown, never claiming one)."""
    gone = observed.recipes() - set(desired.recipes) - set(desired.held)
    desired = replace(desired, prune_confirmed=confirmed(state, gone))
    if not gone or not prune_refused(desired):
        return desired
    recipes: dict[str, Recipe] = {}
    for name in sorted(gone - desired.prune_confirmed):
        last = state.last_applied(name) if namespaces.fits_state(name) else None
        if last is None:
            continue  # nothing to build it from: get lists it from what squeue shows
        try:
            r = load_text(last, f"{name} (last applied)", cluster, preflight=False).recipe
        except Exception:  # noqa: BLE001 - an unreadable last spec: listed from what squeue shows
            continue
        recipes[name] = r if r.name == name else r.model_copy(update={"name": name})
    if not recipes:
        return desired
    built = build_desired(recipes, observed, ports.copy(now), state.root, python, 0)
    return replace(desired, kept=built.recipes)


def probed(desired: Desired) -> Desired:
    """What the probes look at: the converged recipes and the kept ones."""
    return replace(desired, recipes={**desired.recipes, **desired.kept}) if desired.kept else desired


def why(name: str, files: dict[str, list[str]]) -> str:
    """The warning a kept deployment carries, with the file it came from when known."""
    path = next((p for p, names in files.items() if name in names), None)
    return (f"its manifest{' ' + path if path else ''} is gone and the prune guard keeps it running on its last "
            "applied spec (every manifest vanished at once: a mis-mounted directory?); nothing is launched, "
            f"relaunched or cancelled. `reconciler prune {namespaces.display(name)}` tears it down; "
            "putting the file back resumes it")


def mark(st: dict[str, Any], prev: dict, message: str, now: float) -> dict[str, Any]:
    """A kept deployment's status: what runs, as built, with the reason at warning level."""
    st["phase"] = REASON
    _condition(st, prev, "Progressing", False, "PruneGuard", "nothing is acted on while the prune guard holds it", now)
    _condition(st, prev, "Invalid", True, REASON, message, now)
    st["reason"], st["reasonMessage"] = REASON, message
    st["warning"] = {"reason": REASON, "message": message}
    return st


def _condition(st: dict, prev: dict, kind: str, status: bool, reason: str, message: str, now: float) -> None:
    value = "True" if status else "False"
    old = next((c for c in prev.get("conditions", []) if c.get("type") == kind), None)
    since = old["lastTransitionTime"] if old and old.get("status") == value else iso(now)
    conds = st.setdefault("conditions", [])
    new = {"type": kind, "status": value, "reason": reason, "message": message, "lastTransitionTime": since,
           "observedGeneration": st.get("observedGeneration")}
    at = next((i for i, c in enumerate(conds) if c.get("type") == kind), None)
    if at is None:
        conds.append(new)
    else:
        conds[at] = new
