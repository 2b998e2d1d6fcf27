"""plan(desired, observed, now) -> Plan. Pure: no I/O, no clock, no randomness.

Per recipe, first the recipe as a whole:

1. held — its desired state cannot be computed: nothing of it is touched.
2. prune guard — every manifest vanished at once (a mis-mounted directory?): nothing
   is torn down unless ``desired.allow_empty``.
3. teardown — deleted: cancel its steps, then its allocations.
4. suspended — no action at all; what runs keeps running (its counts are still reported).

Then, for a recipe being converged, classify what it has (``classify.classify``: missing,
running, broken, outdated, waiting, extra, duplicates), and decide, in this order:

5. ``allocations.compute_allocations`` — submit what is needed, release what is not;
   ``allocations.compute_handover`` — a successor before a running job's time runs out.
6. ``stop.compute_stop`` — extra steps (scale-down victims, a frontend no longer managed,
   steps on a released allocation), duplicates, the ranks left of a broken multi-node
   worker, and liveness (fatal log line, failed probes after Ready, startup grace).
   ``dependents.compute_dependents`` — units launched before the Ready new life of a service
   they read (etcd, NATS, Mooncake, a gms...) are relaunched with it, on purpose (no backoff).
7. ``placement.compute_services`` — start phases: infra services, before_workers services,
   workers, the frontend, after_frontend services; a unit waits for the earlier phases.
   ``placement.compute_frontend`` — the frontend starts after a worker is Ready.
8. ``placement.compute_placements`` — units never launched go onto their allocation.
9. ``relaunch.compute_relaunch`` — units that had lives come back in place, through the
   restart policy (never / on-failure / always, max_restarts, exponential backoff).
10. ``rollout.compute_rollout`` — older specs are replaced: with surge (a new life beside the
    old one, max_surge per role; the old stops once the new is Ready and routed), else
    max_unavailable at a time.
11. ``relaunch.compute_backoff_reset`` — healthy long enough: the backoff starts afresh.
12. ``action_backoff.compute_action_backoff`` — a recipe whose actions failed waits.
13. ``requeue.requeue_after`` — the earliest moment anything would change on its own
    (``requeue.pending_recheck``: a queued allocation is rechecked slowly, never polled).

Ownership is not a policy here: only objects carrying our marker reach this function.
"""

from __future__ import annotations

from collections.abc import Mapping

from reconciler.core.plan.action_backoff import compute_action_backoff
from reconciler.core.plan.allocations import compute_allocations, compute_handover, release_all
from reconciler.core.plan.classify import Classified, classify, step_order
from reconciler.core.plan.placement import (
    compute_frontend, compute_placements, compute_resizing, compute_services, unplaceable,
)
from reconciler.core.plan.relaunch import compute_backoff_reset, compute_relaunch, restart_gate
from reconciler.core.plan.requeue import ACTIVE_INTERVAL, pending_recheck, requeue_after
from reconciler.core.plan.results import (
    Action, CancelAlloc, CancelStep, LaunchStep, PlaceReason, Plan, RecipePlan, RecipeState, RoleCounts,
    StopReason, SubmitAlloc, Wait, WaitReason,
)
from reconciler.core.plan.rollout import compute_rollout
from reconciler.core.plan.dependents import compute_dependents
from reconciler.core.plan.stop import compute_stop, drained_at, startup_deadline
from reconciler.world import Desired, DesiredRecipe, Observed

__all__ = [
    "ACTIVE_INTERVAL", "Action", "CancelAlloc", "CancelStep", "LaunchStep", "PlaceReason", "Plan", "RecipePlan",
    "RecipeState", "RoleCounts", "StopReason", "SubmitAlloc", "Wait", "WaitReason", "plan", "restart_gate",
]


def plan(desired: Desired, observed: Observed, now: float, edited: Mapping[str, float] | None = None) -> Plan:
    """``edited``: recipe -> when an edit last changed its worker counts (``shell/manifests.applied_since``):
    a scale-down's victims drain from then."""
    out: dict[str, RecipePlan] = {}
    deadlines: list[float | None] = []
    motion = False
    for name, why in desired.held.items():
        out[name] = RecipePlan(name, RecipeState.HELD, detail=why)
    gone = sorted(observed.recipes() - set(desired.recipes) - set(desired.held))
    # `reconciler prune NAME` confirmed that one's teardown: the guard holds only the others
    refused = bool(set(gone) - desired.prune_confirmed) and prune_refused(desired)
    for name in gone:
        if refused and name not in desired.prune_confirmed:
            td = teardown(name, observed, StopReason.RECIPE_DELETED)
            out[name] = RecipePlan(name, RecipeState.PRUNE_REFUSED, deferred=td.actions, detail=(
                "every manifest is gone at once (a mis-mounted directory?); "
                "`reconciler prune NAME` tears one down, `run --allow-empty` all of them"))
        else:
            out[name] = teardown(name, observed, StopReason.RECIPE_DELETED)
    for name in sorted(desired.recipes):
        d = desired.recipes[name]
        try:
            if d.suspended:
                out[name] = suspended(d, observed)
                continue
            rp, moving, dl = converge(d, observed, now, (edited or {}).get(name))
        except Exception as e:  # noqa: BLE001 - a bug met by one recipe must not stop the others
            out[name] = RecipePlan(name, RecipeState.HELD, detail=f"internal error while planning: "
                                                                  f"{type(e).__name__}: {e}")
            continue
        retry_at = compute_action_backoff(observed.action_failures.get(name), now)
        if retry_at is not None and rp.actions:
            rp = defer(rp, retry_at)
            dl = [*dl, retry_at]
        out[name] = rp
        motion |= moving
        deadlines += dl
    for rp in out.values():
        motion |= bool(rp.actions)
    return Plan(out, requeue_after(now, motion, deadlines), refused)


def prune_refused(desired: Desired) -> bool:
    """The prune guard: no manifest file left at all, valid or not, and no --allow-empty."""
    return not desired.recipes and not desired.held and desired.manifests_seen == 0 and not desired.allow_empty


def suspended(d: DesiredRecipe, observed: Observed) -> RecipePlan:
    """Suspended: nothing is launched, stopped or released; the counts say what still runs."""
    return RecipePlan(d.name, RecipeState.SUSPENDED, counts=counts(d, classify(d, observed, frozenset())),
                      detail="suspended: no actions; what runs keeps running")


def teardown(name: str, observed: Observed, reason: StopReason) -> RecipePlan:
    stops = tuple(CancelStep(s.step_id, name, f"{s.role}_{s.index}", reason)
                  for s in sorted(observed.steps_of(name), key=step_order) if s.cancellable)
    return RecipePlan(name, RecipeState.TEARDOWN, stop=stops, release=release_all(name, observed.allocs_of(name), reason))


def converge(d: DesiredRecipe, observed: Observed, now: float,
             edited: float | None = None) -> tuple[RecipePlan, bool, list[float | None]]:
    submit, release = compute_allocations(d, observed)
    successors, unwanted, next_handover = compute_handover(d, observed, now)
    release += unwanted
    c = classify(d, observed, frozenset(a.job_id for a in release))
    stops, w_stop = compute_stop(d, c, now, edited)
    # a job that holds only draining victims stays until they are stopped (its release would end them now)
    draining = {s.job_id for s, kind in c.extra if (t := drained_at(d, s, kind, edited)) is not None and now < t}
    release = tuple(a for a in release if a.job_id not in draining)
    stopping = {s.step_id for s in stops}
    stops += tuple(s for s in compute_dependents(d, c) if s.step_id not in stopping)
    held_svc, w_svc = compute_services(d, c)
    held_fe, w_front = compute_frontend(d, c)
    held_rs, w_resize = compute_resizing(d, c)
    held_back = held_svc | held_fe | held_rs
    place = compute_placements(d, c, held_back)
    relaunch, later, w_relaunch = compute_relaunch(d, c, held_back, now)
    replace, surge, w_roll, dl_roll, measure = compute_rollout(d, c, now, observed)
    reset, next_reset = compute_backoff_reset(d, c, now)
    pending = Wait(WaitReason.ALLOCATION_PENDING, d.pending_reason)
    waiting = {f"{r}_{i}": pending for r, i in c.waiting}
    for part in (w_stop, w_front, w_svc, w_relaunch, w_roll, unplaceable(d), w_resize):
        waiting.update(part)
    rp = RecipePlan(
        d.name, submit=submit + successors, release=release, place=place + relaunch + surge, stop=stops,
        replace=replace,
        relaunch_later=later, waiting=waiting, counts=counts(d, c), reset_backoff=reset, measure=measure,
    )
    # a worker waiting its turn in a rollout beside its serving old life is not motion by itself
    starting = [v for v in c.running + c.broken + c.outdated if not v.ready and (v.current or v not in c.outdated)]
    # waiting on Slurm's queue is not motion: a pending allocation has its own, slower, recheck
    moving = bool(starting or any(w.reason is WaitReason.TERMINATING for w in waiting.values()))
    recheck = pending_recheck(observed.allocs_of(d.name), now) if c.waiting else None
    deadlines = [*later.values(), next_reset, recheck, next_handover, *dl_roll, *(startup_deadline(d, v) for v in c.running),
                 *(w.until for w in w_stop.values() if w.reason is WaitReason.DRAINING)]
    return rp, moving, deadlines


def counts(d: DesiredRecipe, c: Classified) -> dict[str, RoleCounts]:
    # plain dicts, not Counters: counted for every unit of every recipe on each plan()
    desired: dict[str, int] = {}
    running: dict[str, int] = {}
    ready: dict[str, int] = {}
    for v in c.units:
        u = v.unit
        if u.run_once:  # a benchmark is not part of what serves: it never counts as unavailable
            continue
        role = u.role
        desired[role] = desired.get(role, 0) + 1
        if _started(v.current) or _started(v.old):
            running[role] = running.get(role, 0) + 1
        if v.ready:
            ready[role] = ready.get(role, 0) + 1
    for role, _ in c.waiting:
        desired[role] = desired.get(role, 0) + 1
    for name in d.unplaceable:  # wanted, but no allocation can hold it yet: desired and unavailable
        if (role := name.rpartition("_")[0]) != "dedicated":
            desired[role] = desired.get(role, 0) + 1
    return {role: RoleCounts(n, running.get(role, 0), ready.get(role, 0), n - ready.get(role, 0))
            for role, n in desired.items()}


def _started(steps) -> bool:
    for s in steps:
        if not s.pending:
            return True
    return False


def defer(rp: RecipePlan, retry_at: float) -> RecipePlan:
    """The recipe backs off after a failed action: nothing of it is done before ``retry_at``."""
    return RecipePlan(rp.name, rp.state, relaunch_later=rp.relaunch_later, waiting=rp.waiting, counts=rp.counts,
                      detail=rp.detail, deferred=rp.actions, deferred_until=retry_at,
                      measure=rp.measure)  # a measurement is no action: it goes on meanwhile
