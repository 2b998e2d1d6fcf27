"""compute_placements and compute_frontend: units never launched go onto their allocation.

A new worker is placed at its desired index (desired indices are always 0..n-1, so a
scale-up fills the lowest free ones) on the allocation ``desired.place`` chose for it.
The frontend is ordered after the workers: it starts once at least one worker is Ready.
"""

from __future__ import annotations

from reconciler.core.plan.classify import Classified
from reconciler.core.plan.relaunch import launches_for
from reconciler.core.plan.results import LaunchStep, PlaceReason, Wait, WaitReason
from reconciler.world import DesiredRecipe


def compute_frontend(d: DesiredRecipe, c: Classified) -> tuple[frozenset[str], dict[str, Wait]]:
    """A frontend with no step waits for a Ready worker: (units held back, why)."""
    held: set[str] = set()
    waiting: dict[str, Wait] = {}
    for v in c.missing:
        if v.is_frontend and not c.any_worker_ready():
            held.add(v.name)
            waiting[v.name] = Wait(WaitReason.NEEDS_READY_WORKER)
    return frozenset(held), waiting


def compute_placements(d: DesiredRecipe, c: Classified, held_back: frozenset[str]) -> tuple[LaunchStep, ...]:
    out: list[LaunchStep] = []
    for v in c.missing:
        if v.ever_launched or v.name in held_back:
            continue
        out += launches_for(d, v, PlaceReason.NEW)
    return tuple(out)


def unplaceable(d: DesiredRecipe) -> dict[str, Wait]:
    return {name: Wait(WaitReason.UNPLACEABLE, "delete and re-create the recipe to re-pack it")
            for name in d.unplaceable}
