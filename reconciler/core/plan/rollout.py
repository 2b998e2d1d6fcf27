"""compute_rollout: workers on an older spec are replaced, ``max_unavailable`` at a time.

The old step is cancelled now and its successor launched once it is gone (it needs the
same ports). A worker that is not Ready is replaced at once — it serves nothing; a Ready
one only while fewer than ``max_unavailable`` workers are unavailable (waiting for an
allocation, starting, backing off, or being replaced).
"""

from __future__ import annotations

from reconciler.core.plan.classify import Classified
from reconciler.core.plan.results import CancelStep, StopReason, Wait, WaitReason
from reconciler.units import is_service_role
from reconciler.world import DesiredRecipe


def unavailable_workers(c: Classified) -> int:
    return sum(1 for v in c.units if v.is_worker and not v.ready) + sum(1 for r, _ in c.waiting if not is_service_role(r))


def compute_rollout(d: DesiredRecipe, c: Classified) -> tuple[tuple[CancelStep, ...], dict[str, Wait]]:
    budget = d.max_unavailable - unavailable_workers(c)
    replace: list[CancelStep] = []
    waiting: dict[str, Wait] = {}
    for v in c.outdated:
        stale = [s for s in v.old if s.cancellable]
        if not stale:
            waiting[v.name] = Wait(WaitReason.TERMINATING)
            continue
        if v.ready:
            if budget <= 0:
                waiting[v.name] = Wait(WaitReason.ROLLOUT_BUDGET, f"max_unavailable {d.max_unavailable}")
                continue
            budget -= 1
        replace += [CancelStep(s.step_id, d.name, v.name, StopReason.SPEC_CHANGED) for s in stale]
    return tuple(replace), waiting
