"""compute_allocations: submit what a recipe needs and does not have; release what it no longer needs.

compute_handover: a running allocation whose time left (squeue's TimeLeft, read each tick: the end
Slurm granted; or less, when a reservation will take its nodes or its node is quarantined —
``time_left``) falls below the hand-over time gets a successor at the same index, submitted now — and so does one whose GPU
workers must surge but have no GPUs there for a second life (``surge_allocs``), and one whose job holds
fewer GPUs per node than a worker on it now uses (``resize_allocs``: the file packs more workers on its
nodes than when it was submitted); once the successor runs,
the workers move onto it with the rollout's surge rules (``core/succession.py``) and the old
job is released when its last step is gone — before Slurm ends it. The hand-over time is
``reconcile.handover_seconds``, else the moves it takes (workers per role / max_surge) times
the longest launch-to-Ready seen for the recipe's workers (kept in state/launches.json) plus
pick-up and drain, + 60 s, at least 120 s — with no launch-to-Ready seen yet, the recipe's
health-check budget (``health_check.max_attempts × interval_seconds``, the longest a start may
take before it is judged failed) stands in for it: a real engine loads for minutes; either way
at most half the time limit (the one the recipe asks for, and the one Slurm granted:
``--time-min`` lets it grant less), so that a successor is never due the moment it starts.
"""

from __future__ import annotations

from reconciler.core.plan.results import CancelAlloc, StopReason, SubmitAlloc
from reconciler.core.succession import job_order
from reconciler.timefmt import slurm_seconds
from reconciler.world import Alloc, DesiredRecipe, Observed

HANDOVER_FLOOR = 120.0
HANDOVER_MARGIN = 60.0


def compute_allocations(d: DesiredRecipe, observed: Observed) -> tuple[tuple[SubmitAlloc, ...], tuple[CancelAlloc, ...]]:
    """Every allocation spec whose index has no kept live job is submitted; every live job that
    serves no desired worker (``desired.place`` decided which are kept) is released — after its
    steps, which ``compute_stop`` cancels as ``extra``."""
    live = [a for a in observed.allocs_of(d.name) if a.live]
    keep = set(d.keep_allocs)
    have = {a.index for a in live if a.job_id in keep}
    submit = tuple(SubmitAlloc(spec) for spec in d.allocs if spec.index not in have)
    release = tuple(CancelAlloc(a.job_id, d.name, a.index) for a in live if a.job_id not in keep)
    return submit, release


def handover_seconds(d: DesiredRecipe, observed: Observed) -> float:
    if d.handover_seconds is not None:
        want = d.handover_seconds
    else:
        # the workers move max_surge at a time per role, each taking its launch-to-Ready (kept in
        # state/ across restarts) plus the routers' pick-up and the old life's drain
        took = [h.took for u in d.units if (h := observed.health.get(u.key)) is not None and h.took is not None]
        per_role: dict[str, int] = {}
        for u in d.units:
            per_role[u.role] = per_role.get(u.role, 0) + 1
        waves = max((-(-n // max(1, d.max_surge)) for n in per_role.values()), default=1)
        # nothing measured yet: a start may take the whole startup budget, and a successor submitted
        # for a one-second start would leave the old job ending under a worker still loading
        start = max(took) if took else d.startup_grace
        each = start + d.surge_pickup_seconds + d.surge_drain_seconds
        want = max(HANDOVER_FLOOR, waves * each + HANDOVER_MARGIN)
    return min(want, d.time_limit_seconds / 2) if d.time_limit_seconds else want


def compute_handover(d: DesiredRecipe, observed: Observed, now: float
                     ) -> tuple[tuple[SubmitAlloc, ...], tuple[CancelAlloc, ...], float | None]:
    """(successors to submit now, successors no longer wanted — still queued —, when the next one is due)."""
    jobs: dict[int, list[Alloc]] = {}
    for a in observed.allocs_of(d.name):
        if a.live:
            jobs.setdefault(a.index, []).append(a)
    limit: float | None = None  # the hand-over time: worked out once a running job has a time left
    submit: list[SubmitAlloc] = []
    drop: list[CancelAlloc] = []
    due: float | None = None
    for spec in d.allocs:
        held = sorted(jobs.get(spec.index, []), key=lambda a: job_order(a.job_id))
        if not held or not held[0].running or held[0].job_id not in d.keep_allocs:
            continue  # none yet (submitted as missing), or nothing runs to hand over from
        # a surge allocation only for workers whose old life serves: the others are replaced in place
        surge = any(observed.ready.get((d.name, *k)) for k in d.surge_allocs.get(spec.index, ()))
        resize = d.resize_allocs.get(spec.index, "")
        left, why = time_left(held[0], observed, now)
        cap = 0.0  # read only with a time left
        if left is not None:
            limit = handover_seconds(d, observed) if limit is None else limit
            # the hand-over time is at most half the limit Slurm granted (--time-min may have cut it)
            granted = slurm_seconds(held[0].time_limit)
            cap = min(limit, granted / 2) if granted else limit
        short = left is not None and left <= cap
        if len(held) > 1:
            # a job too small for the file's packing keeps a queued successor: that size does not
            # depend on the count, so the count going down and up never flaps it
            bigger = spec.index in d.undersized_allocs
            queued = [a for a in held[1:] if not a.running]
            if not (surge or short or resize or bigger) and len(queued) == len(held) - 1:
                # the reason went away (the change was reverted) while it queued: it would move everything
                drop += [CancelAlloc(a.job_id, d.name, a.index) for a in held[1:]]
            elif resize and queued and all(a.gpus is not None and a.gpus < spec.gpus_per_node for a in queued):
                # edited again while it queued, and now too small itself: one hand-over, not two
                drop += [CancelAlloc(a.job_id, d.name, a.index) for a in queued]
            elif resize and not queued:
                # edited while a hand-over runs: the job handed over to is too small itself (the older one
                # only retires): its successor is due now, not once the older one's limit ends it
                submit.append(SubmitAlloc(spec, f"successor of job {held[-1].job_id}, sized for its workers: {resize}"))
            continue
        if resize:
            submit.append(SubmitAlloc(spec, f"successor of job {held[0].job_id}, sized for its workers: {resize}"))
        elif surge:
            submit.append(SubmitAlloc(spec, f"surge allocation beside job {held[0].job_id}: its workers have no "
                                            "GPUs there for a second life"))
        elif short:
            submit.append(SubmitAlloc(spec, f"successor of job {held[0].job_id}: {why}, hand-over at {cap:.0f}s"))
        elif left is not None:
            due = min(due, now + left - cap) if due is not None else now + left - cap
    return tuple(submit), tuple(drop), due


def time_left(a: Alloc, observed: Observed, now: float) -> tuple[float | None, str]:
    """(seconds the job has left, in words): squeue's TimeLeft, read each tick (the end Slurm
    granted, lowered limits included), or less when it must be gone sooner (a reservation over its
    nodes, its node quarantined: ``observed.deadlines``)."""
    left = slurm_seconds(a.time_left)
    why = f"{a.time_left} left"
    dl = observed.deadlines.get(a.job_id)
    if dl is not None and (left is None or dl[0] - now < left):
        left, why = dl[0] - now, dl[1]
    return left, why


def release_all(name: str, allocs: list[Alloc], reason: StopReason) -> tuple[CancelAlloc, ...]:
    """Teardown: every live allocation of the recipe goes."""
    return tuple(CancelAlloc(a.job_id, name, a.index, reason) for a in allocs if a.live)
