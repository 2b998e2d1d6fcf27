"""compute_services, compute_frontend, compute_placements: what may start, then where.

Start order, srtctl's phases: ``infra`` services (etcd, NATS), then ``before_workers``
services, then the workers and ``with_workers`` services, then the frontend (once a
worker is Ready), then ``after_frontend`` services (once the frontend is Ready). A unit
whose earlier phase is not Ready is held back, for a first launch and a relaunch alike:
a worker does not come back before the etcd it registers in.
A new worker is placed at its desired index (desired indices are always 0..n-1, so a
scale-up fills the lowest free ones) on the allocation ``desired.place`` chose for it.
"""

from __future__ import annotations

from reconciler.core.plan.classify import Classified, UnitView
from reconciler.core.plan.relaunch import launches_for
from reconciler.core.plan.results import LaunchStep, PlaceReason, StopReason, Wait, WaitReason
from reconciler.world import SERVICE_PREFIX
from reconciler.world import DesiredRecipe


_BEFORE = {"before_workers": ("infra",), "with_workers": ("infra", "before_workers"),
           "workers": ("infra", "before_workers"), "frontend": ("infra", "before_workers", "with_workers"),
           "after_frontend": ("infra", "before_workers", "with_workers")}


def compute_services(d: DesiredRecipe, c: Classified) -> tuple[frozenset[str], dict[str, Wait]]:
    """Units without a step whose earlier start phase is not Ready yet: (held back, why)."""
    held: set[str] = set()
    waiting: dict[str, Wait] = {}
    for v in c.missing:
        why = gate(d, c, v)
        if why is not None:
            held.add(v.name)
            waiting[v.name] = why
    return frozenset(held), waiting


def gate(d: DesiredRecipe, c: Classified, v: UnitView) -> Wait | None:
    """Why a new life of ``v`` may not start yet (an earlier phase not Ready), or None. A first
    launch, a relaunch and a rollout's surge life are all held by it."""
    phase = "frontend" if v.is_frontend else v.unit.phase if v.unit.is_service else "workers"
    blocking = [r for p in _BEFORE.get(phase, ()) for r in d.gates.get(p, ()) if not _all_ready(d, c, r)]
    blocking += [f"{r}_{i}" for r, i in v.unit.needs if (r, i) not in c.ready]  # its own per-worker services
    if blocking:
        return Wait(WaitReason.NEEDS_SERVICES, ", ".join(r.removeprefix(SERVICE_PREFIX) for r in blocking))
    if phase == "after_frontend" and not _frontend_ready(d, c):
        return Wait(WaitReason.NEEDS_READY_FRONTEND)
    if v.unit.run_once and not settled(c):
        return Wait(WaitReason.NEEDS_SETTLED)
    return None


def settled(c: Classified) -> bool:
    """Every unit but the run-once ones runs its current spec and is Ready: nothing rolls, starts or
    waits (what a benchmark measures is then the deployment as desired, not a mix of versions)."""
    others = [v for v in c.units if not v.unit.run_once]
    running = {v.key for v in c.running}
    return bool(others) and not c.waiting and all(v.key in running and v.ready for v in others)


def _all_ready(d: DesiredRecipe, c: Classified, role: str) -> bool:
    # a service on several nodes gates its phase once every instance placed so far is Ready
    keys = [(u.role, u.index) for u in d.services if u.role == role] or [(role, 0)]
    return all(k in c.ready for k in keys)


def _frontend_ready(d: DesiredRecipe, c: Classified) -> bool:
    if d.frontend is None:
        return c.any_worker_ready()
    return any((fe.role, fe.index) in c.ready for fe in d.frontends)


def compute_frontend(d: DesiredRecipe, c: Classified) -> tuple[frozenset[str], dict[str, Wait]]:
    """A frontend with no step waits for a Ready worker: (units held back, why)."""
    held: set[str] = set()
    waiting: dict[str, Wait] = {}
    for v in c.missing:
        # a frontend relaunched for its service's new life (etcd...) comes back beside its workers,
        # not after them: it only needs the service, and every second without it is a gap
        if v.is_frontend and not c.any_worker_ready() and not _for_dependency(v):
            held.add(v.name)
            waiting[v.name] = Wait(WaitReason.NEEDS_READY_WORKER)
    return frozenset(held), waiting


def _for_dependency(v: UnitView) -> bool:
    return bool(v.health and v.health.stopped_for == StopReason.DEPENDENCY_RESTARTED.value)


def compute_placements(d: DesiredRecipe, c: Classified, held_back: frozenset[str]) -> tuple[LaunchStep, ...]:
    out: list[LaunchStep] = []
    for v in c.missing:
        if v.ever_launched or v.name in held_back:
            continue
        out += launches_for(d, v, PlaceReason.NEW)
    return tuple(out)


def unplaceable(d: DesiredRecipe) -> dict[str, Wait]:
    return {name: Wait(WaitReason.RESIZING if name in d.resizing else WaitReason.UNPLACEABLE, why)
            for name, why in d.unplaceable.items()}


def compute_resizing(d: DesiredRecipe, c: Classified) -> tuple[frozenset[str], dict[str, Wait]]:
    """A worker whose job holds fewer GPUs than it now uses is not launched there (its new life, a
    restart): it waits for the successor sized for it (units held back, why)."""
    views = [v for v in c.missing if v.name in d.resizing]
    return (frozenset(v.name for v in views),
            {v.name: Wait(WaitReason.RESIZING, f"job {v.job} holds fewer GPUs than it uses") for v in views})
