"""Kubernetes Deployment semantics for a recipe's conditions (shell/status.py, pure): ``Available``
(enough capacity serves, whatever is being rolled out), ``Progressing`` (a change is being rolled
out, True while it moves), ``Ready`` (everything at the desired spec is Ready). Hand-built inputs,
and whole rollouts walked one plan at a time on the in-memory cluster."""

from __future__ import annotations

from dataclasses import replace

import pytest

from builders import alloc, desired, desired_recipe, frontend, life, observed, step, unit
from fakes import FakeCluster, recipe
from reconciler.core.plan import plan
from reconciler.shell.status import build_status

A0, A1 = unit(index=0), unit(index=1)
P0, D0, D1 = unit("prefill", 0), unit("decode", 0), unit("decode", 1)
FE = frontend()


def status(d, o, now=100.0, prev=None):
    rp = plan(desired(d), o, now).recipes[d.name]
    return build_status(d.name, d, o, rp, None, prev or {}, {}, now)


def conds(st) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in st["conditions"]}


@pytest.mark.parametrize("what, d, o, want", [
    ("converged", desired_recipe(A0, A1), observed(step(index=0), step(index=1), ready=[("agg", 0), ("agg", 1)]),
     {"Ready": ("True", "AllReady"), "Available": ("True", "MinimumWorkersAvailable"),
      "Progressing": ("False", "Converged")}),
    # an in-place rollout: the old step still answers on the unit's port while it waits its turn
    ("rolled in place, the old lives serve", desired_recipe(A0, A1),
     observed(step(index=0, spec="old"), step(index=1, spec="old"), ready=[("agg", 0), ("agg", 1)]),
     {"Ready": ("False", "NotReady"), "Available": ("True", "MinimumWorkersAvailable"),
      "Progressing": ("True", "Reconciling")}),
    ("one of two starting", desired_recipe(A0, A1), observed(step(index=0), step(index=1), ready=[("agg", 0)]),
     {"Ready": ("False", "NotReady"), "Available": ("True", "MinimumWorkersAvailable"),
      "Progressing": ("True", "WaitingForReady")}),
    ("nothing answers yet", desired_recipe(A0, A1), observed(step(index=0), step(index=1)),
     {"Ready": ("False", "NotReady"), "Available": ("False", "MinimumWorkersUnavailable"),
      "Progressing": ("True", "WaitingForReady")}),
    # disaggregated: a role with no worker serving makes the deployment unavailable, whatever the others do
    ("every decode worker dead", desired_recipe(P0, D0, D1),
     observed(step("prefill", 0), ready=[("prefill", 0)],
              health={("decode", 0): life(exit=(1, 99.0)), ("decode", 1): life(exit=(1, 99.0))}),
     {"Available": ("False", "MinimumWorkersUnavailable"), "Ready": ("False", "NotReady")}),
    ("one decode worker of two serves", desired_recipe(P0, D0, D1),
     observed(step("prefill", 0), step("decode", 0), ready=[("prefill", 0), ("decode", 0)],
              health={("decode", 1): life(exit=(1, 99.0))}),
     {"Available": ("True", "MinimumWorkersAvailable"), "Ready": ("False", "NotReady")}),
    ("the frontend does not answer", desired_recipe(A0, fe=FE), observed(step(index=0), step("frontend", 0, spec="fe"),
                                                                          ready=[("agg", 0)]),
     {"Available": ("False", "MinimumWorkersUnavailable"), "Ready": ("False", "NotReady")}),
    ("workers and frontend serve", desired_recipe(A0, fe=FE),
     observed(step(index=0), step("frontend", 0, spec="fe"), ready=[("agg", 0), ("frontend", 0)]),
     {"Available": ("True", "MinimumWorkersAvailable"), "Ready": ("True", "AllReady")}),
    # one failed probe below the liveness threshold: the routers keep the worker, so does Available
    ("a worker missed one probe", desired_recipe(A0),
     observed(step(index=0), health={("agg", 0): life(was_ready=True, probe_failures=1)}),
     {"Available": ("True", "MinimumWorkersAvailable"), "Ready": ("False", "NotReady")}),
    # a hand-over: the successor allocation is queued while everything runs on the old one
    ("a successor allocation queued", desired_recipe(A0, A1),
     observed(step(index=0), step(index=1), ready=[("agg", 0), ("agg", 1)],
              allocs=[alloc(), alloc(job="101", state="PENDING", reason="Priority")]),
     {"Available": ("True", "MinimumWorkersAvailable"), "Progressing": ("True", "Reconciling")}),
])
def test_condition_table(what, d, o, want):
    got = conds(status(d, o))
    assert {k: got[k] for k in want} == want, what


A2 = unit(index=2)


@pytest.mark.parametrize("minimum, ready, available", [
    (1, [0], True),  # the default: one serving worker per role
    (2, [0], False),  # the recipe asks for two: one is not enough
    (2, [0, 1], True),
    (3, [0, 1, 2], True),
    (5, [0, 1, 2], True),  # more than the role has: all of them
    (5, [0, 1], False),
])
def test_the_recipes_minimum_decides_available(minimum, ready, available):
    d = replace(desired_recipe(A0, A1, A2), min_available=minimum)
    o = observed(step(index=0), step(index=1), step(index=2), ready=[("agg", i) for i in ready])
    status_, reason = conds(status(d, o))["Available"]
    assert (status_ == "True") is available, (minimum, ready)
    assert reason == ("MinimumWorkersAvailable" if available else "MinimumWorkersUnavailable")


def test_min_available_reaches_the_desired_recipe():
    text = SURGE % {"speed": 100, "workers": 3, "surge": 1, "unavail": 0}
    c = FakeCluster()
    assert c.desired({"r": recipe(text)}).recipes["r"].min_available == 1
    text = text.replace("reconcile: {", "reconcile: {min_available: 2, ")
    assert c.desired({"r": recipe(text)}).recipes["r"].min_available == 2


def test_min_available_is_a_bounded_recipe_key():
    from pydantic import ValidationError

    from reconciler.recipe.reconcile import ReconcileConfig

    assert ReconcileConfig().min_available == 1 and ReconcileConfig(min_available=3).min_available == 3
    for bad in (0, -1, 10**9):
        with pytest.raises(ValidationError, match="min_available"):
            ReconcileConfig(min_available=bad)


def test_the_columns_count_ready_up_to_date_and_available_workers():
    d = desired_recipe(A0, A1, unit(index=2))
    o = observed(step(index=0), step(index=1, spec="old"), step(index=2), ready=[("agg", 0), ("agg", 1)])
    st = status(d, o)
    assert st["replicas"] == {"desired": 3, "ready": 1, "upToDate": 2, "available": 2}
    assert [(w["upToDate"], w["available"]) for w in st["workers"]] == [(True, True), (False, True), (True, False)]


def test_a_draining_victim_is_not_available():
    d = replace(desired_recipe(A0, A1), draining=frozenset({"agg_1"}))
    st = status(d, observed(step(index=0), step(index=1), ready=[("agg", 0), ("agg", 1)]))
    assert st["replicas"]["available"] == 1 and conds(st)["Available"][0] == "True"
    assert conds(st)["Progressing"][0] == "True"  # the scale-down is still being finished


SURGE = """\
name: r
model: {path: /m}
resources: {gpus_per_node: 8}
engine: {type: mocker, speedup_ratio: %(speed)d}
frontend: {type: none}
roles:
  agg: {workers: %(workers)d, gpus: 1}
reconcile: {rollout: {max_surge: %(surge)d, max_unavailable: %(unavail)d}}
"""


def walk(c: FakeCluster, spec: dict, start: float = 1000.0, before=lambda tick: None) -> list[dict]:
    """Plan, record the status as `run` would after the tick, apply; until nothing is left to do.
    ``before(tick)``: what the cluster does on its own first (Slurm granting a job)."""
    seen, prev, now = [], {}, start
    for tick in range(60):
        before(tick)
        desired_ = c.desired(spec)
        o = c.observed(desired_)
        p = plan(desired_, o, now)
        st = build_status("r", desired_.recipes["r"], o, p.recipes["r"], None, prev, {}, now)
        seen.append(st)
        prev = st
        if not p.actions and conds(st)["Progressing"][0] == "False":
            return seen
        c.apply(p)
        now += 10.0  # past every pickup and drain: each tick moves the rollout on
    raise AssertionError("the rollout did not converge")


@pytest.mark.parametrize("workers, surge, unavail", [(1, 1, 0), (3, 1, 0), (2, 0, 1)],
                         ids=["surge-1-worker", "surge-3-workers", "in-place-2-workers"])
def test_a_rollout_never_flaps_available_and_progresses_until_converged(workers, surge, unavail):
    c = FakeCluster()
    text = dict(workers=workers, surge=surge, unavail=unavail)
    c.converge({"r": recipe(SURGE % dict(text, speed=10))})
    seen = walk(c, {"r": recipe(SURGE % dict(text, speed=7))})
    kinds = [conds(st) for st in seen]
    assert all(k["Available"][0] == "True" for k in kinds), [k["Available"] for k in kinds]
    assert any(k["Ready"][0] == "False" for k in kinds)  # not everything at the new spec for a while
    assert kinds[-1]["Ready"] == ("True", "AllReady") and kinds[-1]["Progressing"] == ("False", "Converged")
    # Progressing stays True from the edit until it converged: no False in between
    assert all(k["Progressing"][0] == "True" for k in kinds[:-1]), [k["Progressing"] for k in kinds]
    assert seen[-1]["replicas"] == {"desired": workers, "ready": workers, "upToDate": workers, "available": workers}
    # Available's transition time is the one from before the edit: it never changed
    assert len({next(c["lastTransitionTime"] for c in st["conditions"] if c["type"] == "Available")
                for st in seen}) == 1


def test_a_scale_up_keeps_available_and_progresses():
    c = FakeCluster()
    c.converge({"r": recipe(SURGE % dict(workers=1, surge=1, unavail=0, speed=10))})
    seen = walk(c, {"r": recipe(SURGE % dict(workers=3, surge=1, unavail=0, speed=10))})
    assert all(conds(st)["Available"][0] == "True" for st in seen)
    assert any(conds(st)["Ready"][0] == "False" for st in seen) and conds(seen[-1])["Ready"][0] == "True"


HANDOVER = """\
name: r
model: {path: /m}
resources: {gpus_per_node: 8}
engine: mocker
frontend: {type: builtin}
roles:
  agg: {workers: 2, gpus: 1}
slurm: {time_limit: "10"}
reconcile: {handover_seconds: 120}
"""


def test_a_hand_over_never_flaps_available_nor_progressing():
    """The successor job waits in the queue for a few ticks while everything serves on the old one
    (nothing to do meanwhile: Progressing said Converged then, one second after the submission), then
    the workers and the frontend move onto it with surge and the old job is released."""
    c = FakeCluster()
    spec = {"r": recipe(HANDOVER)}
    c.converge(spec)
    (job,) = c.allocs
    c.allocs[job] = replace(c.allocs[job], time_left="1:00")  # below the hand-over time: a successor
    c.pending = True

    def slurm(tick: int) -> None:
        if tick == 4:  # granted after three ticks in the queue
            c.pending = False
            c.run_alloc()

    seen = walk(c, spec, before=slurm)
    kinds = [conds(st) for st in seen]
    assert job not in c.allocs and len(c.allocs) == 1  # handed over: the old job is gone
    assert all(k["Available"][0] == "True" for k in kinds), [k["Available"] for k in kinds]
    assert all(k["Progressing"][0] == "True" for k in kinds[:-1]), [k["Progressing"] for k in kinds]
    assert kinds[-1]["Progressing"] == ("False", "Converged") and kinds[-1]["Ready"] == ("True", "AllReady")
    assert len(seen) > 5


def test_a_worker_launched_by_this_pass_for_the_first_time_is_starting_not_down():
    """The status is built from the snapshot before this pass's launches: a scale-up's new worker
    has no step in it yet. Not down (Degraded stays False: no blip at every scale-up); a worker
    relaunched after its life failed is (its restart is in the plan)."""
    d = desired_recipe(A0, A1)
    rp = plan(desired(d), observed(step(index=0), ready=[("agg", 0)]), 100.0).recipes["r"]
    assert [(a.unit.name, a.restart) for a in rp.place] == [("agg_1", 0)]
    st = build_status("r", d, observed(step(index=0), ready=[("agg", 0)]), rp, None, {},
                      {"agg_1": {"launches": 1, "restarts": 0}}, 100.0)
    assert [w["phase"] for w in st["workers"]] == ["Ready", "Starting"]
    assert conds(st)["Degraded"] == ("False", "AsExpected")
    crashed = observed(step(index=0), ready=[("agg", 0)], health={("agg", 1): life(exit=(1, 99.0))})
    rp = plan(desired(d), crashed, 100.0).recipes["r"]
    assert [(a.unit.name, a.restart > 0) for a in rp.place] == [("agg_1", True)]
    st = build_status("r", d, crashed, rp, None, {}, {"agg_1": {"launches": 1, "restarts": 0}}, 100.0)
    assert st["workers"][1]["phase"] == "Pending" and conds(st)["Degraded"] == ("True", "WorkersDown")
