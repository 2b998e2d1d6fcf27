"""The moments between an action and squeue showing its effect.

A step we launched takes a moment to appear in squeue; a step we cancelled takes a
moment to go. During those moments the observed world lags our own actions, and
acting on it as is would launch a worker twice or cancel it twice. Both graces are
bounded so that a launch or a cancel that silently failed is retried.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from reconciler.world import InFlight, Step

INFLIGHT_GRACE = 20.0  # seconds a launched step may take to appear in squeue
CANCEL_GRACE = 30.0  # seconds a cancelled step may take to go before it is cancelled again


def _ident(s: Step) -> tuple:
    return (s.recipe, s.role, s.index, s.rank, s.spec_hash)


@dataclass(frozen=True)
class GraceView:
    steps: tuple[Step, ...]  # what plan() sees: squeue's steps, terminating ones marked, launches in flight added
    cancelled: Mapping[str, float]  # cancels still within their grace (the caller keeps only these)
    inflight: tuple[InFlight, ...]  # launches still in flight (the caller keeps only these)
    failed_launches: tuple[InFlight, ...]  # launcher exited before its step ever showed: the launch failed


def apply_grace(
    steps: Iterable[Step], cancelled: Mapping[str, float], inflight: Iterable[InFlight], now: float
) -> GraceView:
    steps = list(steps)
    live_ids = {s.step_id for s in steps}
    keep_cancel = {sid: at for sid, at in cancelled.items() if sid in live_ids and now - at < CANCEL_GRACE}
    out = [dataclasses.replace(s, terminating=True) if s.step_id in keep_cancel else s for s in steps]
    seen = {_ident(s) for s in steps}
    keep: list[InFlight] = []
    failed: list[InFlight] = []
    for f in inflight:
        if _ident(f.step) in seen or now - f.launched_at > INFLIGHT_GRACE:
            continue  # it showed up (or never will): squeue is the truth again
        if f.exited is not None:
            failed.append(f)
            continue
        keep.append(f)
        out.append(f.step)
    return GraceView(tuple(out), keep_cancel, tuple(keep), tuple(failed))
