"""Engines that load for minutes (a real vLLM: 96-300 s here), one expectation table per decision.

Nothing may stop, relaunch or mark failed a life that is still loading within its recipe's
health-check budget (``health_check.max_attempts × interval_seconds``, srtctl's meaning: here
12 × 10 = 120 s); past it, the life is judged failed. Timers that must cover a start (the
hand-over lead time) follow the measured launch-to-Ready, with the budget as the bound when
nothing has been measured yet. docs/operations.md, "Slow starts", lists every timer.
"""

from __future__ import annotations

import dataclasses

import pytest

from fakes import FakeCluster, recipe
from reconciler.core.plan import CancelStep, LaunchStep, StopReason, WaitReason
from reconciler.core.plan.allocations import handover_seconds
from reconciler.core.plan.autoscale import Load, RoleFacts, RoleMemory, decide
from reconciler.core.plan.stop import loading as still_loading
from reconciler.core.plan.quarantine import Failure, Policy, life_span
from reconciler.core.plan.quarantine import step as qstep
from reconciler.recipe.autoscale import AutoscaleConfig
from reconciler.world import Observed, UnitHealth

TEXT = """\
name: r
model: {path: /m}
resources: {gpus_per_node: 8}
engine: {type: mocker, speedup_ratio: %(speed)d}
frontend: {type: none}
roles:
  agg: {workers: %(workers)d, gpus: 1}
health_check: {max_attempts: 12, interval_seconds: 10}
reconcile: {rollout: {max_surge: 1, max_unavailable: 0}}
"""
BUDGET = 120.0
KEY = ("r", "agg", 0)


def spec(workers: int = 1, speed: int = 10) -> dict:
    return {"r": recipe(TEXT % {"workers": workers, "speed": speed})}


def cancels(p) -> list[tuple[str, StopReason]]:
    return sorted((a.unit, a.reason) for a in p.actions if isinstance(a, CancelStep))


def launches(p) -> list[str]:
    return sorted(a.unit.name for a in p.actions if isinstance(a, LaunchStep))


def loading(launched: float, **kw) -> UnitHealth:
    """A life launched at ``launched`` that has never answered its probe."""
    return UnitHealth(**{"launches": 1, "last_launch": launched, "watched_since": launched, **kw})


# (case, the loading life's health, now, expected cancels, expected wait reason of agg_0 or None)
LOADING_CASES = [
    ("a first life 60 s into its load", loading(0.0), 60.0, [], None),
    ("a first life a second before its budget ends", loading(0.0), BUDGET - 1, [], None),
    ("a first life past its budget", loading(0.0), BUDGET + 1, [("agg_0", StopReason.STARTUP_TIMEOUT)], None),
    # the budget is each life's own: a relaunch is not charged the first life's load
    ("a relaunched life 100 s into its load, 400 s after the first launch",
     loading(300.0, launches=2, restarts=1), 400.0, [], None),
    # a reconciler started mid-load (or restarted) gives the life a whole budget from when it first looked
    ("an adopted life loading since before this reconciler started",
     loading(0.0, watched_since=90.0), 200.0, [], None),
    ("an adopted life past its budget from the adoption",
     loading(0.0, watched_since=90.0), 90.0 + BUDGET + 1, [("agg_0", StopReason.STARTUP_TIMEOUT)], None),
]


@pytest.mark.parametrize("case, health, now, stops, _wait", LOADING_CASES, ids=[c[0] for c in LOADING_CASES])
def test_a_loading_life_is_left_alone_within_its_health_check_budget(case, health, now, stops, _wait):
    c = FakeCluster()
    c.converge(spec())
    c.unready.add(KEY)
    c.health[KEY] = health
    p = c.plan(spec(), now=now)
    assert cancels(p) == stops, case
    assert launches(p) == [], case  # nothing is launched beside or instead of it
    if not stops:
        # the loop looks again no later than when the budget would run out
        assert p.requeue_after is not None and p.requeue_after <= health.grace_from + BUDGET - now + 1e-6


# a rollout (an engine flag change): the new life loads beside the old one, which keeps serving
SURGE_CASES = [
    ("the new life 60 s into its load", 60.0, [], WaitReason.SURGE_STARTING),
    ("the new life a second before its budget ends", BUDGET - 1, [], WaitReason.SURGE_STARTING),
    ("the new life past its budget: it goes, the old one serves on", BUDGET + 1,
     [("agg_0", StopReason.STARTUP_TIMEOUT)], None),
]


@pytest.mark.parametrize("case, now, stops, wait", SURGE_CASES, ids=[c[0] for c in SURGE_CASES])
def test_a_rollouts_new_life_loads_beside_the_old_one_for_its_whole_budget(case, now, stops, wait):
    c = FakeCluster()
    c.converge(spec())
    (old,) = c.steps.values()
    c.apply(c.plan(spec(speed=7)))  # the new life, launched at t=0 in the other slot
    c.unready.add((KEY, 1))
    c.health[KEY] = loading(0.0, launches=2)
    p = c.plan(spec(speed=7), now=now)
    assert cancels(p) == stops, case
    assert old.step_id not in {a.step_id for a in p.actions if isinstance(a, CancelStep)}  # the old life stays
    if wait is not None:
        assert p.recipes["r"].waiting["agg_0"].reason is wait


# the hand-over's lead time before a time limit of 60 minutes (half of it: 1800 s at most)
HANDOVER_CASES = [
    ("nothing measured: the health-check budget stands for a start", 1, [], 1 * (BUDGET + 5) + 60),
    ("nothing measured, two workers moved one at a time", 2, [], 2 * (BUDGET + 5) + 60),
    ("a measured 96 s start (real vLLM, loaded machine)", 1, [96.0], max(120.0, 96 + 5 + 60)),
    ("a measured 300 s start, two workers", 2, [300.0, 250.0], 2 * (300 + 5) + 60),
    ("a one-second start: the floor", 1, [1.0], 120.0),
]


@pytest.mark.parametrize("case, workers, took, want", HANDOVER_CASES, ids=[c[0] for c in HANDOVER_CASES])
def test_the_hand_over_lead_time_follows_the_measured_start_else_the_budget(case, workers, took, want):
    text = TEXT.replace("health_check:", 'slurm: {time_limit: "60"}\nhealth_check:')
    c = FakeCluster()
    s = {"r": recipe(text % {"workers": workers, "speed": 10})}
    c.converge(s)
    d = c.desired(s).recipes["r"]
    d = dataclasses.replace(d, surge_pickup_seconds=2.0, surge_drain_seconds=3.0)
    health = {("r", "agg", i): UnitHealth(launches=1, was_ready=True, took=t) for i, t in enumerate(took)}
    assert handover_seconds(d, Observed(health=health)) == pytest.approx(want), case


def test_the_hand_over_lead_time_is_still_at_most_half_the_time_limit():
    text = TEXT.replace("health_check: {max_attempts: 12", 'slurm: {time_limit: "10"}\nhealth_check: {max_attempts: 180')
    c = FakeCluster()
    s = {"r": recipe(text % {"workers": 1, "speed": 10})}
    c.converge(s)
    # nothing measured, a 1800 s budget: capped at 300 s, half the 10-minute limit
    assert handover_seconds(c.desired(s).recipes["r"], Observed()) == pytest.approx(300.0)


# Node quarantine (3 failures within 600 s by default): a worker that fails at the end of each
# 300 s load fails once per load, so a 600 s window would never hold three of its failures. A
# failure counts for ``threshold`` of the failing unit's lives when they are longer than the window.
Q = Policy(threshold=3, window=600.0, cooldown=900.0)


def slow_failure(at: float, span: float) -> Failure:
    return Failure("n1", at, "exited 1", "r/agg_0", span)


QUARANTINE_CASES = [
    # (case, failures (at, span), now, quarantined)
    ("one-second lives: three failures in 600 s", [(0, 1), (10, 1), (20, 1)], 20.0, True),
    ("one-second lives: the first is out of the window", [(0, 1), (300, 1), (610, 1)], 610.0, False),
    ("lives failing at the end of a 300 s load: 310 s apart", [(0, 300), (310, 300), (630, 300)], 630.0, True),
    ("lives of 300 s whose failures are 1000 s apart", [(0, 300), (1000, 300), (2000, 300)], 2000.0, False),
    ("a 200 s load: counted for 600 s, the window", [(0, 200), (305, 200), (610, 200)], 610.0, False),
]


@pytest.mark.parametrize("case, fails, now, quarantined", QUARANTINE_CASES, ids=[c[0] for c in QUARANTINE_CASES])
def test_quarantine_counts_slow_lives_over_threshold_lives(case, fails, now, quarantined):
    history: list[Failure] = []
    q: dict = {}
    for at, span in fails:
        history, q = qstep(history, q, [slow_failure(at, span)], float(at), Q)
    assert ("n1" in q) is quarantined, (case, history)


SPAN_CASES = [
    # (case, the failed life's health, now, its span)
    ("never Ready, exited 250 s into its load", UnitHealth(launches=1, last_launch=100.0, last_exit=(1, 350.0)), 351.0, 250.0),
    ("never Ready, stopped for a fatal line now", UnitHealth(launches=1, last_launch=100.0), 220.0, 120.0),
    ("Ready after a measured 96 s load, then crashed an hour later",
     UnitHealth(launches=1, last_launch=0.0, was_ready=True, ready_after=96.0, last_exit=(1, 3600.0)), 3601.0, 96.0),
    ("Ready, nothing measured", UnitHealth(launches=1, last_launch=0.0, was_ready=True, last_exit=(1, 50.0)), 51.0, 0.0),
    ("never launched by this reconciler", UnitHealth(), 10.0, 0.0),
]


@pytest.mark.parametrize("case, health, now, span", SPAN_CASES, ids=[c[0] for c in SPAN_CASES])
def test_a_failures_span_is_its_load_or_its_life(case, health, now, span):
    assert life_span(health, now) == pytest.approx(span), case


# Scale to zero (idle 100 s): a wake-up whose worker loads for minutes. The held requests may
# give up before it is Ready (a client's timeout, the hold's end); the idle clock must not run
# while the role's only workers load, or the worker goes before it ever served, and a load longer
# than the idle period would never end.
ZERO_CFG = AutoscaleConfig.model_validate({
    "roles": {"agg": {"min": 0, "max": 4, "target": {"waiting_per_worker": 8}}},
    "scale_down_after_seconds": 300, "scale_to_zero_after_seconds": 100, "drain_seconds": 0})
HELD = RoleFacts(0, None, demand=True)
LOADING = RoleFacts(0, None, loading=True)
QUEUED = RoleFacts(0, None)  # no request held, the worker not launched yet (its allocation pending)
SERVING_IDLE = RoleFacts(1, Load(1))

WAKE_CASES = [
    # (case, [(seconds later, facts)] after the role went to zero, the target after each)
    ("a request wakes it; the worker loads 150 s after the client gave up: kept, idle from its Ready",
     [(10, HELD), (20, LOADING), (90, LOADING), (60, LOADING), (60, SERVING_IDLE), (41, SERVING_IDLE)],
     [1, 1, 1, 1, 1, 0]),
    ("the same wake-up while its allocation waits in the queue with no request held: released",
     [(10, HELD), (20, QUEUED), (70, QUEUED), (11, QUEUED)], [1, 1, 1, 0]),
    ("a load judged failed (past its budget: not loading) and nothing held: the idle clock runs",
     [(10, HELD), (20, LOADING), (50, QUEUED), (49, QUEUED), (2, QUEUED)], [1, 1, 1, 1, 0]),
    ("a worker loading beside a Ready one is no demand: an idle role still goes to zero",
     [(10, HELD), (20, SERVING_IDLE), (101, RoleFacts(1, Load(1), loading=True))], [1, 1, 0]),
]


@pytest.mark.parametrize("case, steps, want", WAKE_CASES, ids=[c[0] for c in WAKE_CASES])
def test_a_wake_up_still_loading_is_not_idle(case, steps, want):
    rs = dict(ZERO_CFG.roles.items())["agg"]
    m = RoleMemory(built=0, target=0, last_busy=0.0)
    now, out = 1000.0, []
    for dt, facts in steps:
        now += dt
        m = decide(ZERO_CFG, rs, facts, m, now).memory
        out.append(m.target)
    assert out == want, case


LOADING_STATE = [
    # (case, health, now, loading) with a 120 s budget
    ("launched 60 s ago, never Ready", UnitHealth(launches=1, last_launch=0.0, watched_since=0.0), 60.0, True),
    ("past its budget", UnitHealth(launches=1, last_launch=0.0, watched_since=0.0), 121.0, False),
    ("Ready once in this life", UnitHealth(launches=1, last_launch=0.0, was_ready=True), 60.0, False),
    ("nothing known", None, 60.0, False),
]


@pytest.mark.parametrize("case, health, now, want", LOADING_STATE, ids=[c[0] for c in LOADING_STATE])
def test_loading_is_within_the_budget_and_never_ready(case, health, now, want):
    c = FakeCluster()
    c.converge(spec())
    assert still_loading(c.desired(spec()).recipes["r"], health, now) is want, case
