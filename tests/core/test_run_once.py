"""A run-once unit (the benchmark) against a restarted one: when it starts, that a finished run is
never restarted, and which triggers start a new run (core/plan/relaunch.py:once_gate,
core/plan/placement.py:settled, desired/sources/benchmark.py)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from fakes import FakeCluster, recipe
from reconciler.core.plan import LaunchStep, PlaceReason, WaitReason
from reconciler.core.plan.relaunch import Gate, restart_gate
from reconciler.world import RestartPolicy, UnitHealth

BENCH = "svc-benchmark"
TEXT = """\
name: r
model: {path: /m}
resources: {gpus_per_node: 8}
engine: mocker
frontend: {type: builtin}
roles:
  agg: {workers: 2, gpus: 1, args: {speedup-ratio: %(speedup)s}}
reconcile: {benchmark: %(policy)s}
benchmark: {type: sa-bench, isl: 16, osl: 8, concurrencies: "1x2"}
"""


def recipes(policy="{}", speedup=10):
    return {"r": recipe(TEXT % {"policy": policy, "speedup": speedup})}


def bench_launch(p):
    return [a for a in p.actions if isinstance(a, LaunchStep) and a.unit.role == BENCH]


def bench_unit(c, rs):
    return next(u for u in c.desired(rs).recipes["r"].services if u.role == BENCH)


def finish(c, rs, code=0, at=100.0):
    """The benchmark's step ended with ``code`` at ``at``: its health as the shell reports it."""
    u = bench_unit(c, rs)
    for sid in [s for s, st in c.steps.items() if st.role == BENCH]:
        del c.steps[sid]
    c.health[("r", BENCH, 0)] = UnitHealth(launches=1, last_launch=at - 30, last_exit=(code, at), last_spec=u.spec_hash)


def test_it_starts_only_once_every_unit_is_ready_and_measures_the_frontend():
    c, rs = FakeCluster(), recipes()
    c.unready.add(("r", "agg", 1))
    for _ in range(10):
        p = c.plan(rs)
        assert not bench_launch(p)
        c.apply(p)
    assert p.recipes["r"].waiting[f"{BENCH}_0"].reason is WaitReason.NEEDS_SETTLED
    c.unready.clear()
    p = c.plan(rs)
    (launch,) = bench_launch(p)
    assert launch.reason is PlaceReason.NEW and launch.restart == 0
    argv = launch.launch.argv
    fe = next(u for u in c.desired(rs).recipes["r"].frontends)
    assert argv[1:3] == ("-m", "reconciler.benchrun") and argv[argv.index("--url") + 1] == fe.url
    plan = json.loads(argv[argv.index("--plan") + 1])
    assert [lv["concurrency"] for lv in plan["levels"]] == [1, 2] and plan["osl"] == 8
    c.apply(p)
    assert not c.plan(rs).actions  # one run in flight: nothing else to do
    assert c.plan(rs).recipes["r"].counts.get(BENCH) is None  # never counted as unavailable


@pytest.mark.parametrize("code", [0, 3, 137])
def test_a_finished_run_is_never_restarted_whatever_its_exit(code):
    c, rs = FakeCluster(), recipes()
    c.converge(rs)
    finish(c, rs, code)
    for now in (100.0, 1e5, 1e7):
        p = c.plan(rs, now=now)
        assert not p.actions
        assert p.recipes["r"].waiting[f"{BENCH}_0"].reason is WaitReason.FINISHED


def test_a_rollout_starts_a_new_run_after_it_settles_only_with_on_rollout():
    for policy, again in (("{on: [ready, rollout]}", True), ("{}", False)):
        c = FakeCluster()
        c.converge(recipes(policy))
        finish(c, recipes(policy))
        rolled = recipes(policy, speedup=20)  # the workers' spec changes: a rollout
        launches = []
        for _ in range(30):
            p = c.plan(rolled, now=200.0)
            launches += bench_launch(p)
            if bench_launch(p):  # the workers had all rolled before it started
                d = c.desired(rolled).recipes["r"]
                live = {(s.role, s.index): s.spec_hash for s in c.steps.values()}
                assert all(live[(u.role, u.index)] == u.spec_hash for u in d.units)
            if not p.actions:
                break
            c.apply(p)
        assert [a.reason for a in launches] == ([PlaceReason.NEW] if again else []), policy


def test_a_changed_benchmark_section_runs_again_without_on_rollout():
    c, rs = FakeCluster(), recipes()
    c.converge(rs)
    u = bench_unit(c, rs)
    finish(c, rs)
    c.health[("r", BENCH, 0)] = replace(c.health[("r", BENCH, 0)], last_run_key=u.run_key)
    assert not c.plan(rs, now=200.0).actions  # the same definition: finished
    changed = {"r": recipe((TEXT % {"policy": "{}", "speedup": 10}).replace('"1x2"', '"1x4"'))}
    assert [a.reason for a in bench_launch(c.plan(changed, now=200.0))] == [PlaceReason.NEW]


def test_every_runs_again_that_long_after_the_last_run_ended():
    c, rs = FakeCluster(), recipes("{every: 1h}")
    c.converge(rs)
    finish(c, rs, at=100.0)
    p = c.plan(rs, now=100.0 + 3599)
    assert not p.actions and p.recipes["r"].waiting[f"{BENCH}_0"].reason is WaitReason.FINISHED
    assert p.requeue_after <= 1.0 + 1e-6  # looked at again when the period is over
    assert [a.reason for a in bench_launch(c.plan(rs, now=100.0 + 3600))] == [PlaceReason.NEW]


@pytest.mark.parametrize("policy, h, spec, want", [
    (RestartPolicy("once"), UnitHealth(launches=1, last_exit=(0, 10.0), last_spec="a"), "a", Gate.STOP),
    (RestartPolicy("once", on_change=True), UnitHealth(launches=1, last_exit=(0, 10.0), last_spec="a"), "a", Gate.STOP),
    (RestartPolicy("once", on_change=True), UnitHealth(launches=1, last_exit=(0, 10.0), last_spec="a"), "b", Gate.LAUNCH),
    (RestartPolicy("once"), UnitHealth(launches=1, last_exit=(0, 10.0), last_spec="a"), "b", Gate.STOP),
    (RestartPolicy("once", every_seconds=60), UnitHealth(launches=1, last_exit=(1, 10.0)), "a", Gate.WAIT),
    (RestartPolicy("once", every_seconds=5), UnitHealth(launches=1, last_exit=(1, 10.0)), "a", Gate.LAUNCH),
    (RestartPolicy("always"), UnitHealth(launches=1, last_exit=(0, 10.0)), "a", Gate.LAUNCH),  # the contrast
    (RestartPolicy("once"), UnitHealth(launches=1, last_exit=(0, 10.0), stopped_for="spec changed: replacing"),
     "b", Gate.LAUNCH),  # cancelled by a rollout mid-run: its replacement runs
])
def test_once_gate(policy, h, spec, want):
    gate, reason, _, _ = restart_gate(policy, h, 20.0, spec)
    assert gate is want
    if gate is Gate.LAUNCH and policy.policy == "once":
        assert not reason.restart  # a new run is never counted as a restart


def test_without_the_policy_nothing_runs():
    c = FakeCluster()
    rs = {"r": recipe((TEXT % {"policy": "{}", "speedup": 10}).replace("reconcile: {benchmark: {}}\n", ""))}
    c.converge(rs)
    assert not any(u.role == BENCH for u in c.desired(rs).recipes["r"].services)


def test_the_endpoint_is_the_first_frontend_else_the_first_worker():
    from reconciler.desired.sources.benchmark import endpoint

    c, rs = FakeCluster(), recipes()
    c.converge(rs)
    d = c.desired(rs).recipes["r"]
    assert endpoint((*d.units, *d.frontends)) == d.frontends[0].url
    assert endpoint(d.units) == d.units[0].url  # frontend: none, the workers serve
    assert endpoint(()) is None
