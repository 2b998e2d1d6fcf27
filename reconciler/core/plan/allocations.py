"""compute_allocations: submit what a recipe needs and does not have; release what it no longer needs."""

from __future__ import annotations

from reconciler.core.plan.results import CancelAlloc, StopReason, SubmitAlloc
from reconciler.world import Alloc, DesiredRecipe, Observed


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


def release_all(name: str, allocs: list[Alloc], reason: StopReason) -> tuple[CancelAlloc, ...]:
    """Teardown: every live allocation of the recipe goes."""
    return tuple(CancelAlloc(a.job_id, name, a.index, reason) for a in allocs if a.live)
