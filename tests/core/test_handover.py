"""Hand-over before the time limit: a successor allocation at the same index, the workers moved
onto it with surge, the old job released before Slurm ends it (plan/allocations.py:compute_handover,
core/succession.py)."""

from __future__ import annotations

import dataclasses

import pytest

from fakes import FakeCluster, recipe
from reconciler.core.plan import CancelAlloc, LaunchStep, SubmitAlloc
from reconciler.core.succession import generations
from reconciler.world import Alloc, Step, UnitHealth

TEXT = """\
name: r
model: {path: /m}
resources: {gpus_per_node: 8}
engine: mocker
frontend: {type: %(frontend)s}
roles:
  agg: {workers: 2, gpus: 1}
slurm: {time_limit: "%(limit)s"}
reconcile: {%(handover)s}
"""


def spec(limit="10", handover="handover_seconds: 120", frontend="none"):
    return {"r": recipe(TEXT % {"limit": limit, "handover": handover, "frontend": frontend})}


def left(c: FakeCluster, text: str) -> Alloc:
    (job,) = [j for j, a in c.allocs.items()]
    c.allocs[job] = dataclasses.replace(c.allocs[job], time_left=text)
    return c.allocs[job]


def submits(p):
    return [a for a in p.actions if isinstance(a, SubmitAlloc)]


def test_a_successor_is_submitted_when_the_time_left_falls_below_the_hand_over_time():
    c = FakeCluster()
    c.converge(spec())
    left(c, "5:00")
    p = c.plan(spec(), now=1000.0)
    assert not p.actions and p.requeue_after == pytest.approx(180.0)  # 300 s left, hand-over at 120
    old = left(c, "1:59")
    (s,) = submits(c.plan(spec(), now=1000.0))
    assert s.spec.index == 0 and f"successor of job {old.job_id}" in s.describe()


def test_the_workers_move_onto_the_successor_with_surge_and_the_old_job_is_released():
    c = FakeCluster()
    c.converge(spec(frontend="builtin"))
    old = left(c, "1:00")
    c.apply(c.plan(spec(frontend="builtin"), now=1000.0))  # the successor, granted at once
    new = next(j for j in c.allocs if j != old.job_id)
    p = c.plan(spec(frontend="builtin"), now=1000.0)
    moved = [a for a in p.actions if isinstance(a, LaunchStep)]
    assert {(a.job_id, a.unit.name) for a in moved} >= {(new, "agg_0")}  # the new life, on the successor
    assert not any(isinstance(a, CancelAlloc) for a in p.actions)  # the old job still serves
    lives_max = 0
    for _ in range(40):
        p = c.plan(spec(frontend="builtin"), now=1000.0)
        if not p.actions:
            break
        c.apply(p)
        workers = [s for s in c.steps.values() if s.role == "agg"]
        lives_max = max(lives_max, len(workers))
        assert {s.index for s in workers} == {0, 1}  # never a worker without a life
    assert list(c.allocs) == [new] and {s.job_id for s in c.steps.values()} == {new}
    assert lives_max <= 3  # desired + max_surge


def test_a_successor_waiting_in_the_queue_leaves_everything_where_it_is():
    c = FakeCluster()
    c.converge(spec())
    left(c, "1:00")
    c.pending = True
    c.apply(c.plan(spec(), now=1000.0))
    assert len(c.allocs) == 2
    p = c.plan(spec(), now=1000.0)
    assert not p.actions  # no second successor, nothing moves, nothing is released


def test_the_hand_over_time_is_at_most_half_the_time_limit():
    c = FakeCluster()
    c.converge(spec(limit="2", handover="handover_seconds: 300"))
    left(c, "1:30")
    assert not submits(c.plan(spec(limit="2", handover="handover_seconds: 300")))
    left(c, "0:59")
    assert submits(c.plan(spec(limit="2", handover="handover_seconds: 300")))


def test_the_default_hand_over_time_is_the_launch_to_ready_time_plus_a_minute_at_least_two():
    c = FakeCluster()
    c.converge(spec(handover=""))
    # nothing measured: a start may take the health-check budget (the default 180 x 10 s), capped at
    # half the 10-minute limit: 300 s
    left(c, "4:59")
    assert submits(c.plan(spec(handover="")))
    left(c, "5:01")
    assert not submits(c.plan(spec(handover="")))
    for i in (0, 1):
        c.health[("r", "agg", i)] = UnitHealth(launches=1, last_launch=0.0, ready_since=1.0, was_ready=True,
                                               watched_since=0.0, took=1.0)
    # measured: a one-second start; two workers moved one at a time (+ pick-up and drain), + 60 s: 120 s
    left(c, "3:00")
    assert not submits(c.plan(spec(handover="")))
    left(c, "1:59")
    assert submits(c.plan(spec(handover="")))
    c.health[("r", "agg", 0)] = UnitHealth(launches=1, last_launch=0.0, ready_since=150.0, was_ready=True,
                                           watched_since=1.0, took=150.0)
    left(c, "3:00")
    # the longest start seen, 150 s: two moves of 155 s + 60 s, capped at half the limit, 300 s > 180 s left
    assert submits(c.plan(spec(handover="")))


def test_no_time_limit_means_no_hand_over():
    c = FakeCluster()
    c.converge(spec(limit="UNLIMITED"))
    left(c, "UNLIMITED")
    assert not c.plan(spec(limit="UNLIMITED")).actions


def _alloc(job, index=0, state="RUNNING"):
    return Alloc(job, "r", index, 0, 1, state, nodes=("n",) if state == "RUNNING" else ())


@pytest.mark.parametrize("jobs, busy, current, successors, retiring", [
    ([_alloc("5")], [], "5", {}, []),
    ([_alloc("5"), _alloc("9", state="PENDING")], [], "5", {0: ["9"]}, []),
    ([_alloc("5"), _alloc("9")], ["5"], "9", {}, ["5"]),  # moving: the old job until its steps are gone
    ([_alloc("5"), _alloc("9")], [], "9", {}, []),  # moved: the old job goes
    ([_alloc("5", state="PENDING"), _alloc("9", state="PENDING")], [], "5", {0: ["9"]}, []),
])
def test_generations(jobs, busy, current, successors, retiring):
    steps = [Step(f"{j}.0", "r", "agg", 0, 0, "h") for j in busy]
    cur, succ, ret = generations(jobs, steps)
    assert [a.job_id for a in cur] == [current] and succ == successors and ret == retiring


def test_the_router_moving_to_another_node_is_probed_where_its_old_life_runs():
    c = FakeCluster()
    c.converge(spec(frontend="builtin"))
    old = left(c, "1:00")
    c.node_names = "m{}"  # Slurm grants the successor on another node
    c.apply(c.plan(spec(frontend="builtin"), now=1000.0))
    d = c.desired(spec(frontend="builtin")).recipes["r"]
    prev = d.previous[("frontend", 0)]
    old_fe = next(s for s in c.steps.values() if s.role == "frontend")
    assert old_fe.job_id == old.job_id and prev.nodes == old_fe.nodes and prev.slot == old_fe.slot
    assert d.frontend.nodes != prev.nodes and d.frontend.slot != prev.slot


def _plan_with(c: FakeCluster, recipes: dict, now: float, deadlines: dict):
    from reconciler.core.plan import plan

    d = c.desired(recipes)
    return plan(d, dataclasses.replace(c.observed(d), deadlines=deadlines), now)


@pytest.mark.parametrize("time_left, granted, hand_over", [
    ("5:00", "10:00", False),  # 300 s left, hand-over at 120 s
    ("1:59", "10:00", True),
    # Slurm granted 3 minutes (--time-min, or a limit lowered with scontrol): at most half of it, 90 s
    ("1:40", "3:00", False),
    ("1:29", "3:00", True),
])
def test_the_hand_over_follows_the_limit_slurm_granted(time_left, granted, hand_over):
    c = FakeCluster()
    c.converge(spec(handover="handover_seconds: 120"))
    (job,) = list(c.allocs)
    c.allocs[job] = dataclasses.replace(c.allocs[job], time_left=time_left, time_limit=granted)
    assert bool(submits(c.plan(spec(), now=1000.0))) is hand_over


@pytest.mark.parametrize("deadline_in, hand_over", [(580.0, False), (121.0, False), (119.0, True), (-5.0, True)])
def test_a_deadline_before_the_time_limit_moves_the_hand_over(deadline_in, hand_over):
    c = FakeCluster()
    c.converge(spec())
    old = left(c, "9:50")  # 590 s left
    why = "reservation maint takes n1 from 2026-12-05T00:00:00Z"
    p = _plan_with(c, spec(), 1000.0, {old.job_id: (1000.0 + deadline_in, why)})
    got = submits(p)
    assert bool(got) is hand_over
    if got:
        assert why in got[0].describe()
    else:  # woken when it is due
        assert p.requeue_after == pytest.approx(deadline_in - 120.0)


def test_a_successor_for_a_deadline_is_kept_while_the_deadline_holds():
    c = FakeCluster()
    c.converge(spec())
    old = left(c, "9:00")
    c.pending = True
    dl = {old.job_id: (1050.0, "reservation maint")}
    c.apply(_plan_with(c, spec(), 1000.0, dl))
    assert len(c.allocs) == 2
    assert not _plan_with(c, spec(), 1000.0, dl).actions  # kept, waited for
    # the reservation was deleted: the queued successor would move everything for nothing
    (drop,) = _plan_with(c, spec(), 1000.0, {}).actions
    assert isinstance(drop, CancelAlloc) and drop.job_id != old.job_id


DYNAMO = """\
name: r
model: {path: /m}
resources: {gpus_per_node: 8}
engine: {type: mocker}
frontend: {type: dynamo, enable_multiple_frontends: false}
roles:
  agg: {workers: 1, gpus: 1}
slurm: {time_limit: "10"}
reconcile: {handover_seconds: 120}
"""


def test_a_dynamo_stack_moves_whole_etcd_first_and_its_old_life_last():
    """etcd, the frontend and the worker each start a new life on the successor beside the old one
    (etcd's on its own port, which the new lives read); the old worker stops only after the old
    frontend, the old etcd only after both, and never is the stack without a frontend (issue 27,
    item 6)."""
    from reconciler.core.plan import CancelStep

    c = FakeCluster()
    recipes = {"r": recipe(DYNAMO)}
    c.converge(recipes)
    old = left(c, "1:00")
    c.apply(c.plan(recipes, now=1000.0))  # the successor, granted at once
    new = next(j for j in c.allocs if j != old.job_id)
    d = c.desired(recipes).recipes["r"]
    etcd = d.services[0]
    assert etcd.slot == 1  # its own ports and data directory: both lives run at once
    env = dict(d.frontend.launches[0].env)
    assert env["ETCD_ENDPOINTS"].endswith(f":{etcd.ports['client']}")  # the new lives read the new etcd
    order: list[str] = []
    most_etcds = 0
    for _ in range(60):
        p = c.plan(recipes, now=1000.0)
        if not p.actions:
            break
        for a in p.actions:
            if isinstance(a, CancelStep):
                order.append(a.unit)
        c.apply(p)
        fronts = [s for s in c.steps.values() if s.role == "frontend"]
        assert fronts, "no frontend at some point of the hand-over"
        most_etcds = max(most_etcds, sum(1 for s in c.steps.values() if s.role == "svc-etcd"))
    assert most_etcds == 2  # the new etcd beside the old one, not after it
    assert list(c.allocs) == [new] and {s.job_id for s in c.steps.values()} == {new}
    # the old frontend leaves first (a Dynamo frontend without its workers answers 503), then the
    # old worker, then the old etcd they both read
    assert order.index("frontend_0") < order.index("agg_0") < order.index("svc-etcd_0"), order
