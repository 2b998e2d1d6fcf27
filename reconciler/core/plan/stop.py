"""compute_stop: which running steps are cancelled, each with the reason and the victim named.

The victims of a scale-down are the steps of units that are no longer desired: desired
indices are always 0..n-1, so these are the highest indices. A worker that is up but
dead inside (liveness) is stopped here and brought back by ``compute_relaunch``.
"""

from __future__ import annotations

from reconciler.core.plan.classify import Classified, UnitView
from reconciler.core.plan.results import CancelStep, StopReason, Wait, WaitReason
from reconciler.world import DesiredRecipe, Step, UnitHealth


def compute_stop(d: DesiredRecipe, c: Classified, now: float,
                 edited: float | None = None) -> tuple[tuple[CancelStep, ...], dict[str, Wait]]:
    """``edited``: when an edit last changed the recipe's worker counts (None: unknown)."""
    stops: list[CancelStep] = []
    waiting: dict[str, Wait] = {}
    for s, kind in c.extra:
        reason = {"frontend": StopReason.FRONTEND_UNMANAGED, "service": StopReason.SERVICE_UNMANAGED}.get(
            kind, StopReason.SCALED_DOWN)
        if (until := drained_at(d, s, kind, edited)) is not None and now < until:
            waiting[f"{s.role}_{s.index}"] = Wait(WaitReason.DRAINING, f"stopped at the latest {until - now:.1f}s from now", until)
            continue
        stops += _cancel(d.name, [s], reason)
    stops += [CancelStep(s.step_id, d.name, f"{s.role}_{s.index}", StopReason.DUPLICATE) for s in c.duplicates]
    for v in c.broken:
        # a rank of a multi-node worker died: the whole endpoint comes back together
        stops += _cancel(d.name, v.current, StopReason.RANK_LOST, v.name)
    for v in c.running:
        if not all(s.cancellable for s in v.current):
            if any(s.terminating for s in v.current):
                waiting[v.name] = Wait(WaitReason.TERMINATING)
            continue
        verdict = liveness(d, v.health, now, v.unit.startup_timeout)
        if verdict is not None:
            stops += _cancel(d.name, v.current, verdict[0], v.name, verdict[1])
    return tuple(stops), waiting


def drained_at(d: DesiredRecipe, s: Step, kind: str, edited: float | None) -> float | None:
    """When a worker the file no longer wants is stopped: it left the routers (the endpoints file,
    the routers' /workers lists) the moment the edit was applied, and its requests under way are
    let finish as a rollout's old life's are (pickup, then drain, from the edit: a controller
    restart keeps the clock). None: at once (a step not started, or the edit is unknown). An
    autoscaler's victim was drained before its count went down: its edit is long past."""
    if kind != "scaled down" or edited is None or s.pending:
        return None
    return edited + d.surge_pickup_seconds + d.surge_drain_seconds


def liveness(d: DesiredRecipe, h: UnitHealth | None, now: float,
             timeout: float | None = None) -> tuple[StopReason, str] | None:
    """Why a running unit must be stopped (reason, detail), or None; ``timeout`` overrides the
    recipe's startup grace (a service's readiness.timeout_seconds)."""
    grace = d.startup_grace if timeout is None else timeout
    if h is None:
        return None
    if h.fatal:
        return StopReason.FATAL_LOG, h.fatal[:160]
    if dead(d, h, now):
        return StopReason.LIVENESS, f"{h.probe_failures} health probes failed in a row"
    if not h.was_ready and h.grace_from is not None and now - h.grace_from > grace:
        return StopReason.STARTUP_TIMEOUT, f"{grace:g}s"
    return None


def dead(d: DesiredRecipe, h: UnitHealth, now: float) -> bool:
    """Ready before, and ``liveness_failures`` probes in a row have failed over at least
    ``liveness_seconds`` (Kubernetes' failure threshold times its period): a count alone is a time
    that follows the pass rate (0.5 s while anything converges), and three slow answers in a row
    within two seconds are a loaded host's stall as often as a hung process. ``failing_since``
    unknown: the count alone. No deadline of its own for requeue_after: a failing unit is not
    Ready, which keeps the loop at its converging pace (a past deadline would spin it)."""
    if not h.was_ready or h.probe_failures < d.liveness_failures:
        return False
    return h.failing_since is None or now - h.failing_since >= d.liveness_seconds


def serving(d: DesiredRecipe, ready: bool, h: UnitHealth | None) -> bool:
    """Ready, or Ready before and not (yet) judged dead: a failed probe below the liveness
    threshold neither takes a worker out of the routers nor starts a surge hand-over over."""
    return ready or bool(h and h.was_ready and h.missing_since is None and 0 < h.probe_failures < d.liveness_failures)


def old_life_serving(d: DesiredRecipe, ready: bool, failures: int) -> bool:
    """A surging worker's old life, by its own probes: Ready, or Ready before and failing fewer
    than ``liveness_failures`` probes in a row since (``serving``'s rule for a current life). While
    its successor is not picked up it may be the role's only worker, and one slow /health answer
    must not empty the routers' list of it."""
    return ready or 0 < failures < d.liveness_failures


def loading(d: DesiredRecipe, h: UnitHealth | None, now: float, timeout: float | None = None) -> bool:
    """A life launched and never Ready, still within its startup grace (``liveness``'s rule: not
    judged failed yet). The caller knows the life has a step (a life that ended is not loading)."""
    grace = d.startup_grace if timeout is None else timeout
    return h is not None and not h.was_ready and h.grace_from is not None and now - h.grace_from <= grace


def startup_deadline(d: DesiredRecipe, v: UnitView) -> float | None:
    """When a running, never-Ready worker runs out of startup grace (for requeue_after)."""
    h = v.health
    if h is None or h.was_ready or h.grace_from is None:
        return None
    return h.grace_from + (d.startup_grace if v.unit.startup_timeout is None else v.unit.startup_timeout)


def _cancel(recipe: str, steps, reason: StopReason, unit: str | None = None, detail: str = "") -> list[CancelStep]:
    return [CancelStep(s.step_id, recipe, unit or f"{s.role}_{s.index}", reason, detail)
            for s in steps if isinstance(s, Step) and s.cancellable]
