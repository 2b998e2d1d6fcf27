"""One expectation table per policy, on hand-built desired/observed values: the named sets and counts."""

from __future__ import annotations

import pytest

from builders import JOB, alloc, desired, desired_recipe, frontend, life, observed, step, unit
from reconciler.core.plan import PlaceReason, RecipeState, RoleCounts, StopReason, WaitReason, plan
from reconciler.world import ActionFailures, RestartPolicy
from builders import sets, expect, run


A0, A1, A2 = unit(index=0), unit(index=1), unit(index=2)
NEVER = {"agg": RestartPolicy("never")}

STOP_CASES = [
    ("scale-down victims are the extra indices", desired_recipe(A0),
     observed(step(index=0), step(index=1), step(index=2), ready=[("agg", 0)]),
     expect(stop=[("100.10", "SCALED_DOWN"), ("100.20", "SCALED_DOWN")])),
    ("a frontend no longer managed", desired_recipe(A0),
     observed(step(index=0), step("frontend", 0, spec="fe"), ready=[("agg", 0)]),
     expect(stop=[("100.0", "FRONTEND_UNMANAGED")])),
    ("the newer duplicate goes", desired_recipe(A0),
     observed(step(index=0, num=1), step(index=0, num=5), ready=[("agg", 0)]),
     expect(stop=[("100.5", "DUPLICATE")])),
    ("the rank left of a broken worker goes", desired_recipe(unit(index=0, ranks=2)),
     observed(step(index=0, rank=1)), expect(stop=[("100.1", "RANK_LOST")])),
    ("a fatal log line", desired_recipe(A0),
     observed(step(index=0), ready=[("agg", 0)], health={("agg", 0): life(was_ready=True, fatal="CUDA error")}),
     expect(stop=[("100.0", "FATAL_LOG")])),
    ("probes failing after Ready, at the threshold", desired_recipe(A0, liveness_failures=2),
     observed(step(index=0), health={("agg", 0): life(was_ready=True, probe_failures=2)}),
     expect(stop=[("100.0", "LIVENESS")])),
    ("probes failing at the threshold for liveness_seconds (10): dead", desired_recipe(A0, liveness_failures=2),
     observed(step(index=0), health={("agg", 0): life(was_ready=True, probe_failures=2, failing_since=90.0)}),
     expect(stop=[("100.0", "LIVENESS")])),
    ("probes failing at the threshold for less than liveness_seconds: a stall, not yet dead",
     desired_recipe(A0, liveness_failures=2),
     observed(step(index=0), health={("agg", 0): life(was_ready=True, probe_failures=5, failing_since=91.0)}), expect()),
    ("probes failing, below the threshold", desired_recipe(A0, liveness_failures=2),
     observed(step(index=0), health={("agg", 0): life(was_ready=True, probe_failures=1)}), expect()),
    ("startup grace exceeded", desired_recipe(A0, startup_grace=30),
     observed(step(index=0), health={("agg", 0): life(launched=60.0)}), expect(stop=[("100.0", "STARTUP_TIMEOUT")])),
    ("within startup grace", desired_recipe(A0, startup_grace=30),
     observed(step(index=0), health={("agg", 0): life(launched=80.0)}), expect()),
    ("a step being cancelled is not cancelled again", desired_recipe(A0),
     observed(step(index=0, terminating=True), health={("agg", 0): life(was_ready=True, fatal="x")}),
     expect(waiting={"agg_0": "TERMINATING"})),
]

RELAUNCH_CASES = [
    ("never launched: placed", desired_recipe(A0, A1), observed(step(index=0), ready=[("agg", 0)]),
     expect(place=[("agg_1", 0, "NEW", 0)])),
    ("died, backoff over: a restart", desired_recipe(A0),
     observed(health={("agg", 0): life(restarts=1, exit=(1, 50.0))}), expect(place=[("agg_0", 0, "RELAUNCH", 2)])),
    ("died: the first relaunch is immediate", desired_recipe(A0),
     observed(health={("agg", 0): life(exit=(1, 99.5))}), expect(place=[("agg_0", 0, "RELAUNCH", 1)])),
    ("died again, in backoff: later (from the exit record)", desired_recipe(A0),
     observed(health={("agg", 0): life(restarts=1, exit=(1, 95.0))}),
     expect(later={"agg_0": 105.0}, waiting={"agg_0": "BACKOFF"})),
    ("died, restart never", desired_recipe(A0, restart=NEVER),
     observed(health={("agg", 0): life(exit=(1, 50.0))}), expect(waiting={"agg_0": "GAVE_UP"})),
    ("replaced on purpose: at once, not a restart", desired_recipe(A0, restart=NEVER),
     observed(health={("agg", 0): life(restarts=4, exit=(143, 99.0), stopped_for="spec changed: replacing")}),
     expect(place=[("agg_0", 0, "REPLACEMENT", 0)])),
    ("a multi-node worker comes back whole", desired_recipe(unit(index=0, ranks=2)),
     observed(health={("agg", 0): life(exit=(1, 10.0))}),
     expect(place=[("agg_0", 0, "RELAUNCH", 1), ("agg_0", 1, "RELAUNCH", 1)])),
    ("the frontend waits for a Ready worker", desired_recipe(A0, fe=frontend()), observed(step(index=0)),
     expect(waiting={"frontend_0": "NEEDS_READY_WORKER"})),
    ("the frontend starts once one is Ready", desired_recipe(A0, fe=frontend()),
     observed(step(index=0), ready=[("agg", 0)]), expect(place=[("frontend_0", 0, "NEW", 0)])),
    ("a unit waiting for its allocation", desired_recipe(A0, waiting=[("agg", 1)], pending_reason="Resources"),
     observed(step(index=0), ready=[("agg", 0)]), expect(waiting={"agg_1": "ALLOCATION_PENDING"})),
    ("a unit no allocation can hold", desired_recipe(A0, unplaceable=["agg_1"]),
     observed(step(index=0), ready=[("agg", 0)]), expect(waiting={"agg_1": "UNPLACEABLE"})),
]

ROLL_CASES = [
    ("a Ready worker is replaced within budget", desired_recipe(A0, A1),
     observed(step(index=0, spec="old"), step(index=1, spec="old"), ready=[("agg", 0), ("agg", 1)]),
     expect(replace=["100.0"], waiting={"agg_1": "ROLLOUT_BUDGET"})),
    ("budget 2", desired_recipe(A0, A1, max_unavailable=2),
     observed(step(index=0, spec="old"), step(index=1, spec="old"), ready=[("agg", 0), ("agg", 1)]),
     expect(replace=["100.0", "100.10"])),
    ("a worker that is not Ready is replaced at once, outside the budget", desired_recipe(A0, A1),
     observed(step(index=0, spec="old"), step(index=1, spec="old"), ready=[("agg", 1)]),
     expect(replace=["100.0"], waiting={"agg_1": "ROLLOUT_BUDGET"})),
    ("one already unavailable: no Ready worker is touched", desired_recipe(A0, A1, A2),
     observed(step(index=0, spec="old"), step(index=1), ready=[("agg", 0)], health={("agg", 2): life(restarts=1, exit=(1, 99.0))}),
     expect(waiting={"agg_0": "ROLLOUT_BUDGET", "agg_2": "BACKOFF"}, later={"agg_2": 109.0})),
    ("an old step still shutting down", desired_recipe(A0),
     observed(step(index=0, spec="old", terminating=True)), expect(waiting={"agg_0": "TERMINATING"})),
]

ALLOC_CASES = [
    ("fresh: submit, and its workers wait for it", desired_recipe(waiting=[("agg", 0)], keep=()), observed(allocs=()),
     expect(submit=[0], waiting={"agg_0": "ALLOCATION_PENDING"})),
    ("kept: nothing", desired_recipe(A0), observed(step(index=0), ready=[("agg", 0)]), expect()),
    ("no longer needed: released", desired_recipe(A0), observed(step(index=0), allocs=[alloc(), alloc(1, "101")],
                                                               ready=[("agg", 0)]), expect(release=["101"])),
    ("second index missing", desired_recipe(A0, allocs=(0, 1)), observed(step(index=0), ready=[("agg", 0)]),
     expect(submit=[1])),
]


@pytest.mark.parametrize("what, d, o, want", STOP_CASES + RELAUNCH_CASES + ROLL_CASES + ALLOC_CASES,
                         ids=[c[0] for c in STOP_CASES + RELAUNCH_CASES + ROLL_CASES + ALLOC_CASES])
def test_policy_table(what, d, o, want):
    _p, rp = run(d, o)
    assert sets(rp) == want


COUNT_CASES = [
    ("two desired, one ready, one starting, one waiting", desired_recipe(A0, A1, waiting=[("agg", 2)]),
     observed(step(index=0), step(index=1), ready=[("agg", 0)]),
     {"agg": RoleCounts(desired=3, running=2, ready=1, unavailable=2)}),
    ("frontend counted apart", desired_recipe(A0, fe=frontend()),
     observed(step(index=0), step("frontend", 0, spec="fe"), ready=[("agg", 0), ("frontend", 0)]),
     {"agg": RoleCounts(1, 1, 1, 0), "frontend": RoleCounts(1, 1, 1, 0)}),
]


@pytest.mark.parametrize("what, d, o, want", COUNT_CASES, ids=[c[0] for c in COUNT_CASES])
def test_counts(what, d, o, want):
    assert dict(run(d, o)[1].counts) == want


def test_a_deleted_recipe_is_torn_down_and_a_suspended_one_is_left_alone():
    o = observed(step(index=0), step(index=1, terminating=True))
    p = plan(desired(desired_recipe(A0, name="other"), manifests_seen=1), o, 0)
    assert p.recipes["r"].state is RecipeState.TEARDOWN
    assert sets(p.recipes["r"]) == expect(stop=[("100.0", "RECIPE_DELETED")], release=["100"])
    assert [type(a).__name__ for a in p.for_recipe("r")] == ["CancelStep", "CancelAlloc"]
    p = plan(desired(desired_recipe(A0, keep=()).__class__(**{**desired_recipe(A0).__dict__, "suspended": True})),
             o, 0)
    # suspended: nothing is stopped or released, and what runs is still counted
    assert p.recipes["r"].state is RecipeState.SUSPENDED and not p.recipes["r"].actions
    assert (p.recipes["r"].counts["agg"].desired, p.recipes["r"].counts["agg"].running) == (1, 1)


@pytest.mark.parametrize("seen, allow_empty, refused", [(0, False, True), (0, True, False), (1, False, False)])
def test_prune_guard(seen, allow_empty, refused):
    p = plan(desired(manifests_seen=seen, allow_empty=allow_empty), observed(step(index=0)), 0)
    assert p.refused_prune is refused
    assert p.recipes["r"].state is (RecipeState.PRUNE_REFUSED if refused else RecipeState.TEARDOWN)
    assert bool(p.actions) is not refused


def test_prune_confirmed_tears_down_that_one_and_the_guard_holds_the_others():
    """`reconciler prune NAME` (Desired.prune_confirmed): NAME is torn down, another held one is not;
    once every held recipe is confirmed the guard holds nothing (gateways and ports are let go)."""
    from dataclasses import replace

    o = observed(step(index=0), step(index=0, recipe="s", job="200"), allocs=(alloc(), alloc(job="200", recipe="s")))
    p = plan(replace(desired(manifests_seen=0), prune_confirmed=frozenset({"r"})), o, 0)
    assert p.recipes["r"].state is RecipeState.TEARDOWN and p.for_recipe("r")
    assert p.recipes["s"].state is RecipeState.PRUNE_REFUSED and not p.for_recipe("s") and p.recipes["s"].deferred
    assert p.refused_prune and "reconciler prune" in p.recipes["s"].detail
    p = plan(replace(desired(manifests_seen=0), prune_confirmed=frozenset({"r", "s"})), o, 0)
    assert not p.refused_prune and {rp.state for rp in p.recipes.values()} == {RecipeState.TEARDOWN}


def test_a_held_recipe_is_left_alone():
    p = plan(desired(held={"r": "PortsExhausted: no free port"}), observed(step(index=0)), 0)
    assert p.recipes["r"].state is RecipeState.HELD and not p.actions


@pytest.mark.parametrize("failures, now, deferred", [
    (None, 100.0, False), (ActionFailures(1, 99.0), 100.0, True), (ActionFailures(1, 97.0), 100.0, False),
    (ActionFailures(3, 95.0), 100.0, True), (ActionFailures(30, 0.0), 299.0, True), (ActionFailures(30, 0.0), 301, False),
])
def test_action_error_backoff_defers_a_recipes_actions(failures, now, deferred):
    d = desired_recipe(waiting=[("agg", 0)], keep=())
    o = observed(allocs=(), failures={"r": failures} if failures else {})
    p, rp = run(d, o, now)
    assert bool(rp.deferred) is deferred and bool(rp.actions) is not deferred
    if deferred:
        assert p.requeue_after <= rp.deferred_until - now


@pytest.mark.parametrize("what, d, o, now, want", [
    ("converged and Ready: nothing scheduled", desired_recipe(A0), observed(step(index=0), ready=[("agg", 0)]), 100,
     None),
    ("an action planned: look again soon", desired_recipe(A0), observed(), 100, 0.5),
    ("backing off: wake when it ends", desired_recipe(A0),
     observed(health={("agg", 0): life(restarts=1, exit=(1, 95.0))}), 100,
     5.0),
    ("starting: keep probing", desired_recipe(A0), observed(step(index=0)), 100, 0.5),
    # a Ready-before unit failing its probes, not dead yet: the converging pace, never a past
    # deadline (0: the loop would spin) — below the count long after the first failure, or at it
    ("failing below the count, the window long past: keep probing", desired_recipe(A0, liveness_failures=10),
     observed(step(index=0), health={("agg", 0): life(was_ready=True, probe_failures=3, failing_since=0.0)}), 100, 0.5),
    ("failing at the count inside the window: keep probing", desired_recipe(A0),
     observed(step(index=0), health={("agg", 0): life(was_ready=True, probe_failures=4, failing_since=95.0)}), 100, 0.5),
    ("backoff counter resets at ready_since + reset_after", desired_recipe(A0),
     observed(step(index=0), ready=[("agg", 0)], health={("agg", 0): life(restarts=2, ready_since=50.0,
                                                                          was_ready=True)}), 100, 550.0),
    ("gave up: nothing will change", desired_recipe(A0, restart=NEVER),
     observed(health={("agg", 0): life(exit=(1, 5.0))}), 100, None),
    # waiting on Slurm's queue is not motion: half the time waited so far, at least 1 s
    ("just submitted: look again in a second", desired_recipe(waiting=[("agg", 0)]),
     observed(allocs=[alloc(state="PENDING", submitted=99.5)]), 100, 1.0),
    ("queued 10 s: look again in 5 s", desired_recipe(waiting=[("agg", 0)]),
     observed(allocs=[alloc(state="PENDING", reason="Resources", submitted=90.0)]), 100, 5.0),
    ("queued an hour: the resync decides", desired_recipe(waiting=[("agg", 0)]),
     observed(allocs=[alloc(state="PENDING", reason="Priority", submitted=100.0 - 3600)]), 100, 1800.0),
    ("configuring (nodes booting) is waiting too", desired_recipe(waiting=[("agg", 0)]),
     observed(allocs=[alloc(state="CONFIGURING", submitted=80.0)]), 100, 10.0),
    ("submit time unknown: the resync decides", desired_recipe(waiting=[("agg", 0)]),
     observed(allocs=[alloc(state="PENDING")]), 100, None),
    ("the earliest of two queued allocations", desired_recipe(waiting=[("agg", 0), ("agg", 1)], allocs=(0, 1), keep=(JOB, "101")),
     observed(allocs=[alloc(state="PENDING", submitted=40.0), alloc(1, "101", "PENDING", submitted=96.0)]), 100, 2.0),
    ("a queued allocation does not slow a starting worker", desired_recipe(A0, waiting=[("agg", 1)], allocs=(0, 1)),
     observed(step(index=0), allocs=[alloc(), alloc(1, "101", "PENDING", submitted=0.0)]), 100, 0.5),
])
def test_requeue_after(what, d, o, now, want):
    assert run(d, o, now)[0].requeue_after == want


def test_backoff_reset_after_the_healthy_period():
    h = life(restarts=2, ready_since=0.0, was_ready=True)
    o = observed(step(index=0), ready=[("agg", 0)], health={("agg", 0): h})
    assert run(desired_recipe(A0), o, 599.0)[1].reset_backoff == ()
    assert run(desired_recipe(A0), o, 600.0)[1].reset_backoff == ("agg_0",)
    unready = observed(step(index=0), health={("agg", 0): h})
    assert run(desired_recipe(A0), unready, 700.0)[1].reset_backoff == ()


# a file scale-down: its victims drain from the edit (pickup + drain: 2 + 3 s by default) before they stop
DRAIN_CASES = [
    ("edited 1 s ago: the victims drain", 99.0, observed(step(index=0), step(index=1), ready=[("agg", 0)]),
     expect(waiting={"agg_1": "DRAINING"}), 104.0),
    ("pickup + drain over: stopped", 95.0, observed(step(index=0), step(index=1), ready=[("agg", 0)]),
     expect(stop=[("100.10", "SCALED_DOWN")]), None),
    ("a step not started yet carries nothing: no drain (and, pending, nothing to cancel yet)", 99.0,
     observed(step(index=0), step(index=1, pending=True), ready=[("agg", 0)]), expect(), None),
    ("no edit known (an autoscaler's victim, drained before its count fell): at once", None,
     observed(step(index=0), step(index=1), ready=[("agg", 0)]), expect(stop=[("100.10", "SCALED_DOWN")]), None),
    ("a victim alone in its job: the job stays until the victim has drained", 99.0,
     observed(step(index=0), step(index=1, job="101"), allocs=[alloc(0), alloc(1, job="101")], ready=[("agg", 0)]),
     expect(waiting={"agg_1": "DRAINING"}), 104.0),
    ("a victim alone in its job, drained: stopped and the job released", 95.0,
     observed(step(index=0), step(index=1, job="101"), allocs=[alloc(0), alloc(1, job="101")], ready=[("agg", 0)]),
     expect(stop=[("101.10", "SCALED_DOWN")], release=["101"]), None),
    ("a frontend no longer managed goes at once", 99.0,
     observed(step(index=0), step("frontend", 0, spec="fe"), ready=[("agg", 0)]),
     expect(stop=[("100.0", "FRONTEND_UNMANAGED")]), None),
]


@pytest.mark.parametrize("what, edited, o, want, look_again", DRAIN_CASES, ids=[c[0] for c in DRAIN_CASES])
def test_a_file_scale_down_drains_its_victims(what, edited, o, want, look_again):
    d = desired_recipe(A0)
    p = plan(desired(d), o, 100.0, {d.name: edited} if edited is not None else None)
    assert sets(p.recipes[d.name]) == want
    if look_again is not None:  # the loop looks again when the drain is over
        assert p.requeue_after == pytest.approx(look_again - 100.0)


def test_stop_reasons_are_a_closed_set_and_only_a_rollout_or_a_dependency_is_on_purpose():
    # a dependent relaunched with its service's new life is no failure of its own (no backoff); nor is
    # a surge life stopped by rollout analysis (it is not restarted at all: core/plan/analysis.py)
    assert {r for r in StopReason if r.on_purpose} == {StopReason.SPEC_CHANGED, StopReason.SUPERSEDED,
                                                       StopReason.DEPENDENCY_RESTARTED, StopReason.ANALYSIS_FAILED}
    assert {r for r in StopReason if not r.ends_unit} == {StopReason.SUPERSEDED}
    assert {r for r in PlaceReason if r.restart} == {PlaceReason.RELAUNCH}
    assert WaitReason("restart backoff") is WaitReason.BACKOFF
