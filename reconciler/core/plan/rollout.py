"""compute_rollout: workers on an older spec are replaced — with surge, or ``max_unavailable`` at a time.

With ``max_surge`` > 0 (the default, 1) a worker's new life starts in its other life slot
(its own ports and logs, ``core/slots.py``) while the old one keeps serving; at most
``max_surge`` such extra lives per role at once. The old life leaves the routers once the
new one has been Ready for ``surge_pickup_seconds`` (``old_life_routed``), and is stopped
``surge_drain_seconds`` later, when its requests are done. So a one-worker role changes
with no failed request. An old life that is not Ready serves nothing: it is stopped at
once and its successor started beside it, with no surge budget spent.

Without surge (``max_surge: 0``; always for the frontend and services, whose ports are
their address) the old step is cancelled now and its successor launched once it is gone
(it needs the same ports): a not-Ready worker at once, a Ready one only while fewer than
``max_unavailable`` workers are unavailable. A GPU engine's worker whose allocation holds
no GPUs for a second life (``DesiredRecipe.no_room``) is rolled so when ``max_unavailable``
allows; with ``max_unavailable: 0`` it waits for a *surge allocation* (a successor job at its
index, ``allocations.compute_handover``) and moves there with surge, like a hand-over.
"""

from __future__ import annotations

from collections import Counter

from reconciler.core.plan import analysis
from reconciler.core.plan.classify import Classified, UnitView
from reconciler.core.plan.dependents import dependents
from reconciler.core.plan.placement import gate
from reconciler.core.plan.relaunch import Gate, launches_for, restart_gate
from reconciler.core.plan.stop import liveness, serving, startup_deadline
from reconciler.core.plan.results import CancelStep, LaunchStep, Measure, PlaceReason, StopReason, Wait, WaitReason
from reconciler.world import FRONTEND, is_service_role
from reconciler.world import DesiredRecipe, Observed, UnitHealth

ANALYSIS_LOOK = 1.0  # seconds between looks for a measurement's result while one runs


def unavailable_workers(c: Classified) -> int:
    return sum(1 for v in c.units if v.is_worker and not v.ready) + sum(1 for r, _ in c.waiting if not is_service_role(r))


def surges(d: DesiredRecipe, v: UnitView) -> bool:
    """The unit's new life runs beside its old one (in the other slot) rather than after it: a
    worker, the built-in router, or a service or frontend moving to another allocation (a
    hand-over: its new life has its own address on the successor)."""
    moving = any(s.job_id != v.job for s in v.old)
    return (d.max_surge > 0 and (v.is_worker or v.unit.shares_port or moving) and bool(v.old)
            and all(s.slot != v.unit.slot for s in v.old))


def clients_left(d: DesiredRecipe, c: Classified, v: UnitView) -> list[str]:
    """The units whose old lives still run beside a new one and read this service's old address:
    its old life stays until they are gone (a stack moves whole: the old frontend keeps
    serving through the old etcd until the new one answers)."""
    if v.is_worker:
        return _frontends_left(c, v)
    if not is_service_role(v.unit.role):
        return []
    views = {(u.unit.role, u.unit.index): u for u in c.units}
    return [u.name for key in dependents(d).get((v.unit.role, v.unit.index), ())
            if (u := views.get(key)) is not None and any(s.cancellable or s.pending for s in u.old)]


def _frontends_left(c: Classified, v: UnitView) -> list[str]:
    """A worker moving to another allocation (a hand-over) keeps its old life while an old life of
    a frontend on that allocation still runs: a Dynamo frontend serves only the workers of its own
    etcd, so the old one answers 503 once its workers are gone, and the gateway may still send it
    requests until its successor answers. (The built-in router's lives share one address and
    route to every Ready worker: they do not hold a worker.)"""
    away = {s.job_id for s in v.old if s.job_id != v.job}
    if not away:
        return []
    return [f.name for f in c.units if f.unit.role == FRONTEND and not f.unit.shares_port
            and any(s.job_id in away and (s.cancellable or s.pending) for s in f.old)]


def old_life_routed(d: DesiredRecipe, new_ready: bool, h: UnitHealth | None, now: float, start: float | None) -> bool:
    """Whether a surging worker's old life is still given requests: until its successor has been
    Ready for ``surge_pickup_seconds`` (the routers have picked the new one up by then). The clock
    runs from ``start`` (``analysis.handover_start``: the new life's first Ready probe, or when its
    rollout analysis passed; None: not yet) and a probe that fails below the liveness threshold
    does not bring the old life back (``stop.serving``): a flapping probe neither starts the
    hand-over over nor churns the routers. A new life judged dead is cancelled, and the old one
    is routed again."""
    return not (serving(d, new_ready, h) and start is not None and now >= start + d.surge_pickup_seconds)


def compute_rollout(
    d: DesiredRecipe, c: Classified, now: float, o: Observed | None = None,
) -> tuple[tuple[CancelStep, ...], tuple[LaunchStep, ...], dict[str, Wait], list[float], tuple[Measure, ...]]:
    """(old steps to cancel, surge lives to launch, who waits and why, when to look again, lives to
    measure for the rollout analysis). ``o``: the facts the analysis reads (``Observed.analysis``)."""
    o = o if o is not None else Observed()
    budget = d.max_unavailable - unavailable_workers(c)
    extra = Counter(v.unit.role for v in c.outdated if surges(d, v) and v.current)  # surge lives running
    replace: list[CancelStep] = []
    place: list[LaunchStep] = []
    waiting: dict[str, Wait] = {}
    deadlines: list[float] = []
    measure: list[Measure] = []
    for v in c.outdated:
        if (why := _rollout_failed(d, o, v)) is not None:
            # the new spec failed its analysis beside this old one: its new life goes (the old one
            # never left the routers) and none is started again until the recipe changes
            replace += [CancelStep(s.step_id, d.name, v.name, StopReason.ANALYSIS_FAILED, why)
                        for s in v.current if s.cancellable]
            waiting[v.name] = Wait(WaitReason.ROLLOUT_FAILED, why)
            continue
        stale = [s for s in v.old if s.cancellable]
        if not stale:
            waiting[v.name] = Wait(WaitReason.TERMINATING)
            continue
        if v.name in d.resizing:
            # its new spec uses GPUs its job does not hold: the old life serves until the successor
            # sized for it runs, and it moves there with the workers (allocations.compute_handover)
            waiting[v.name] = Wait(WaitReason.RESIZING, f"job {v.job} holds fewer GPUs than it now uses")
            continue
        if surges(d, v):
            _surge(d, c, v, stale, now, extra, replace, place, waiting, deadlines, (o, measure))
            continue
        if v.ready and v.is_worker:
            if v.name in d.no_room and d.max_unavailable == 0:
                # no GPUs for a surge life here: it moves to the surge allocation once that runs
                waiting[v.name] = Wait(WaitReason.SURGE_ALLOCATION, f"job {v.job}")
                continue
            if budget <= 0:
                waiting[v.name] = Wait(WaitReason.ROLLOUT_BUDGET, f"max_unavailable {d.max_unavailable}")
                continue
            budget -= 1
        replace += [CancelStep(s.step_id, d.name, v.name, StopReason.SPEC_CHANGED) for s in stale]
    return tuple(replace), tuple(place), waiting, deadlines, tuple(measure)


def _rollout_failed(d: DesiredRecipe, o: Observed, v: UnitView) -> str | None:
    return analysis.failed(d, o, v.unit.role) if analysis.applies(d, v.unit) else None


def _analyse(d: DesiredRecipe, o: Observed, v: UnitView, now: float, waiting: dict, deadlines: list,
             measure: list) -> bool:
    """Ask for the next measurement of this surge, if any; whether one is wanted (the unit waits)."""
    old = analysis.old_spec_of(v.old, v.unit)
    if not analysis.applies(d, v.unit) or old is None:
        return False
    m = analysis.next_measure(d, o, v.unit, old, serving(d, v.ready, v.health))
    if m is None:
        return False
    measure.append(m)
    waiting[v.name] = Wait(WaitReason.ANALYSING, f"the {m.life} life at {m.url}")
    deadlines.append(now + ANALYSIS_LOOK)
    return True


def _surge(d: DesiredRecipe, c: Classified, v: UnitView, stale: list, now: float, extra: Counter, replace: list,
           place: list, waiting: dict, deadlines: list, facts: tuple[Observed, list]) -> None:
    role = v.unit.role
    h = v.health
    o, measure = facts
    if v.current:  # the new life runs (or is being launched)
        if all(s.cancellable for s in v.current):
            # the new life is held to the same liveness as any: a fatal line, a lost rank, no Ready
            # within the startup grace — it goes, the old one keeps serving, the restart policy decides
            verdict = liveness(d, h, now, v.unit.startup_timeout)
            if verdict is None and not {l.rank for l in v.unit.launches} <= {s.rank for s in v.current}:
                verdict = (StopReason.RANK_LOST, "its new life")
            if verdict is not None:
                replace += [CancelStep(s.step_id, d.name, v.name, verdict[0], verdict[1]) for s in v.current]
                return
        if _analyse(d, o, v, now, waiting, deadlines, measure):
            return  # the old life is measured while the new one starts; the new one once Ready
        old_spec = analysis.old_spec_of(v.old, v.unit)
        start = analysis.handover_start(d, o, v.unit, old_spec, h)
        if not (serving(d, v.ready, h) and h is not None and start is not None):
            due = startup_deadline(d, v)
            waiting[v.name] = Wait(WaitReason.SURGE_STARTING, f"slot {'ab'[v.unit.slot]}", due)
            if due is not None:
                deadlines.append(due)
            return
        done = start + d.surge_pickup_seconds + d.surge_drain_seconds
        if now >= done and not v.ready:
            # drained, but the new life's probe fails right now: the old one is not stopped until
            # it answers again (or is judged dead, and the old one serves on)
            waiting[v.name] = Wait(WaitReason.SURGE_HANDOVER, "the new life's probe failed: the old one waits")
        elif now >= done and (left := clients_left(d, c, v)):
            waiting[v.name] = Wait(WaitReason.SURGE_HANDOVER, f"its old life serves {', '.join(left[:3])}'s old lives")
        elif now >= done:
            replace += [CancelStep(s.step_id, d.name, v.name, StopReason.SUPERSEDED) for s in stale]
        else:
            routed = old_life_routed(d, v.ready, h, now, start)
            waiting[v.name] = Wait(WaitReason.SURGE_HANDOVER, "the old life is routed beside the new one" if routed
                                   else "the old life drains its requests", done)
            deadlines.append(done if not routed else start + d.surge_pickup_seconds)
        return
    held = gate(d, c, v)
    if held is not None:
        waiting[v.name] = held  # e.g. a hand-over's etcd is not Ready on the successor yet
        return
    if not v.old_ready:
        # the old life serves nothing: it goes now, and its successor starts beside it at once
        replace += [CancelStep(s.step_id, d.name, v.name, StopReason.SPEC_CHANGED) for s in stale]
        place += launches_for(d, v, PlaceReason.REPLACEMENT)
        return
    reason = PlaceReason.REPLACEMENT
    if h is not None and h.last_exit is not None and h.last_exit[1] >= (h.last_launch or 0.0) - 1:
        # the new life launched last has ended: its next launch goes through the restart policy
        gated, why, detail, due = restart_gate(d.policy(role), h, now)
        if gated is Gate.WAIT:
            waiting[v.name] = Wait(WaitReason.BACKOFF, f"its new life {detail}", due)
            deadlines.append(due)  # type: ignore[arg-type]
            return
        if gated is Gate.STOP:
            waiting[v.name] = Wait(WaitReason.GAVE_UP, f"its new life {detail}; the old one keeps serving")
            return
        reason = why  # type: ignore[assignment]
    if extra[role] >= d.max_surge:
        waiting[v.name] = Wait(WaitReason.ROLLOUT_BUDGET, f"max_surge {d.max_surge}")
        return
    extra[role] += 1
    place += launches_for(d, v, reason)
