"""Issue 46 item 6, the pure rules: a ConfigError is never charged to a node, and a changed spec
starts a fresh backoff (the old spec's is not waited out)."""

from __future__ import annotations

import dataclasses

from builders import desired_recipe, expect, life, observed, run, sets, step, unit
from reconciler.core.plan import LaunchStep, PlaceReason
from reconciler.core.plan.quarantine import Policy, failures, step as qstep
from reconciler.drivers.state import StateDir
from reconciler.world import Observed, UnitHealth

A0 = unit(index=0)  # spec "new"


def test_a_refused_launch_is_not_charged_to_its_node():
    s = dataclasses.replace(step(), pending=True)  # a launch srun refused before its step showed
    charged = failures([], Observed(steps=()), [s], 9.0)
    assert [(f.node, f.what) for f in charged] == [("n0-0", "launch failed")]
    assert failures([], Observed(steps=()), [s], 9.0, refused=frozenset({"r/agg_0"})) == []
    # three refusals in a row quarantine nothing; three node faults do
    hist, q = [], {}
    for t in (1.0, 2.0, 3.0):
        hist, q = qstep(hist, q, failures([], Observed(), [s], t, refused=frozenset({"r/agg_0"})), t, Policy())
    assert q == {}
    for t in (1.0, 2.0, 3.0):
        hist, q = qstep(hist, q, failures([], Observed(), [s], t), t, Policy())
    assert set(q) == {"n0-0"}


def test_a_life_the_engine_refused_is_not_charged_when_relaunched():
    crashed = UnitHealth(launches=1, last_launch=0.0, last_exit=(2, 1.0))  # argparse exits 2
    relaunch = LaunchStep(A0, A0.launches[0], "100", PlaceReason.RELAUNCH, 1)
    obs = Observed(steps=(), health={A0.key: crashed})
    assert [f.what for f in failures([relaunch], obs, [], 9.0)] == ["exited 2"]
    assert failures([relaunch], obs, [], 9.0, refused=frozenset({"r/agg_0"})) == []


def test_a_changed_spec_starts_at_once_not_after_the_old_specs_backoff():
    failing = {("agg", 0): life(restarts=4, exit=(255, 95.0), last_spec="new")}
    _, rp = run(desired_recipe(A0), observed(health=failing))
    assert sets(rp) == expect(later={"agg_0": 95.0 + 80.0}, waiting={"agg_0": "BACKOFF"})  # 10 s doubling: 80 s
    fixed = {("agg", 0): life(restarts=4, exit=(255, 95.0), last_spec="old")}
    _, rp = run(desired_recipe(A0), observed(health=fixed))
    assert sets(rp) == expect(place=[("agg_0", 0, "REPLACEMENT", 0)])  # not a restart: a fresh start


def test_a_changed_spec_is_launched_even_after_max_restarts():
    from reconciler.world import RestartPolicy

    gave_up = RestartPolicy("always", max_restarts=2)
    h = {("agg", 0): life(restarts=2, exit=(1, 95.0), last_spec="new")}
    assert sets(run(desired_recipe(A0, restart={"agg": gave_up}), observed(health=h))[1])["waiting"] == {"agg_0": "GAVE_UP"}
    h = {("agg", 0): life(restarts=2, exit=(1, 95.0), last_spec="old")}
    assert sets(run(desired_recipe(A0, restart={"agg": gave_up}), observed(health=h))[1])["place"] == (
        ("agg_0", 0, "REPLACEMENT", 0),)


def test_the_backoff_counter_is_the_specs(tmp_path):
    s = StateDir(tmp_path)
    for _ in range(3):
        s.count_launch("r", "agg_0", 1.0, restart=True, spec="old")
    assert s.launches("r")["agg_0"]["backoff"] == 3
    s.count_launch("r", "agg_0", 2.0, restart=False, spec="new")  # the changed spec's launch
    rec = s.launches("r")["agg_0"]
    assert rec["backoff"] == 0 and rec["restarts"] == 3  # RESTARTS still says what happened
    s.count_launch("r", "agg_0", 3.0, restart=True, spec="new")
    assert s.launches("r")["agg_0"]["backoff"] == 1
