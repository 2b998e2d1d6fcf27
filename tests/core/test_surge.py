"""Rollouts with surge: the new life starts beside the old one, in the other life slot, and the
old one stops only once the new one has been Ready and routed (core/plan/rollout.py, core/slots.py)."""

from __future__ import annotations

import pytest

from fakes import FakeCluster, recipe
from reconciler.core.plan import CancelStep, LaunchStep, PlaceReason, StopReason, SubmitAlloc, WaitReason
from reconciler.core.slots import choose_slots, surge_flips
from reconciler.world import Step, UnitHealth

TEXT = """\
name: r
model: {path: /m}
resources: {gpus_per_node: 8}
engine: {type: mocker, speedup_ratio: %(speed)d}
frontend: {type: none}
roles:
  agg: {workers: %(workers)d, gpus: 1}
reconcile: {rollout: {max_surge: %(surge)d, max_unavailable: 0}}
"""


def spec(workers=3, speed=10, surge=1):
    return {"r": recipe(TEXT % {"workers": workers, "speed": speed, "surge": surge})}


def launches(p):
    return sorted((a.unit.name, a.unit.slot, a.reason) for a in p.actions if isinstance(a, LaunchStep))


def cancels(p):
    return sorted((a.unit, a.reason) for a in p.actions if isinstance(a, CancelStep))


def test_the_new_life_starts_beside_the_old_one_and_the_old_stops_after_the_hand_over():
    c = FakeCluster()
    c.converge(spec(1))
    old = next(iter(c.steps.values()))
    assert old.slot == 0
    p = c.plan(spec(1, speed=7))
    assert launches(p) == [("agg_0", 1, PlaceReason.REPLACEMENT)] and cancels(p) == []
    c.apply(p)
    # mid-surge the old life is still known (its slot, ports, URL): it is probed and routed until it leaves
    (prev,) = c.desired(spec(1, speed=7)).recipes["r"].previous.values()
    assert prev.slot == 0 and prev.url and prev.url != c.desired(spec(1, speed=7)).recipes["r"].units[0].url
    c.unready.add((old.unit_key, 1))  # the new life starts
    p = c.plan(spec(1, speed=7))
    assert not p.actions and p.recipes["r"].waiting["agg_0"].reason is WaitReason.SURGE_STARTING
    c.unready.clear()
    # Ready since t=100: routed beside the old one until 102, the old one drains until 105
    c.health[old.unit_key] = UnitHealth(launches=2, was_ready=True, ready_since=100.0, first_ready=100.0)
    for now, want in ((101.0, "routed"), (103.0, "drains")):
        p = c.plan(spec(1, speed=7), now=now)
        w = p.recipes["r"].waiting["agg_0"]
        assert not p.actions and w.reason is WaitReason.SURGE_HANDOVER and want in w.detail
    assert p.requeue_after == pytest.approx(2.0)
    p = c.plan(spec(1, speed=7), now=105.0)
    assert cancels(p) == [("agg_0", StopReason.SUPERSEDED)] and p.actions[0].step_id == old.step_id
    c.apply(p)
    assert not c.plan(spec(1, speed=7), now=106.0).actions
    assert [s.slot for s in c.steps.values()] == [1]


def _handed_over(c, new_key, now, **health):
    """The surge hand-over of a one-worker role whose new life was first Ready at t=100."""
    c.health[new_key] = UnitHealth(launches=2, was_ready=True, first_ready=100.0, **health)
    if not health.get("ready_since"):
        c.unready.add((new_key, 1))
    p = c.plan(spec(1, speed=7), now=now)
    c.unready.clear()
    return p


@pytest.mark.parametrize("now, health, want", [
    # Ready again after a failed probe at 101.5: the clock still runs from 100 (pick-up 102, stop 105)
    (103.0, {"ready_since": 102.0}, "drains"),
    (105.0, {"ready_since": 102.0}, StopReason.SUPERSEDED),
    # failing its probe now, below the liveness threshold (3): still serving, the old life is not routed again
    (103.0, {"probe_failures": 1}, "drains"),
    # drained, but its probe fails right now: the old life is not stopped yet
    (106.0, {"probe_failures": 2}, "probe failed"),
    # judged dead: cancelled, and the old life serves on
    (106.0, {"probe_failures": 3}, StopReason.LIVENESS),
])
def test_a_flapping_new_life_neither_starts_the_hand_over_over_nor_brings_the_old_life_back(now, health, want):
    from reconciler.world import Observed
    from reconciler.shell.readiness import router_sync

    c = FakeCluster()
    c.converge(spec(1))
    old = next(iter(c.steps.values()))
    c.apply(c.plan(spec(1, speed=7)))
    p = _handed_over(c, old.unit_key, now, **health)
    if isinstance(want, StopReason):
        assert cancels(p) == [("agg_0", want)]
    else:
        w = p.recipes["r"].waiting["agg_0"]
        assert not p.actions and w.reason is WaitReason.SURGE_HANDOVER and want in w.detail
    d = c.desired(spec(1, speed=7)).recipes["r"]
    o = Observed((), (), {old.unit_key: bool(health.get("ready_since"))}, {old.unit_key: c.health[old.unit_key]},
                 previous_ready={old.unit_key: True})
    routed = [u.slot for u in router_sync.old_lives(d, o, now)]
    assert routed == ([0] if want is StopReason.LIVENESS else [])
    # the built-in router is given only the workers Ready now: the old life stands in while the new one fails
    assert [u.slot for u in router_sync.old_lives(d, o, now, strict=True)] == ([] if health.get("ready_since") else [0])


@pytest.mark.parametrize("surge, at_once", [(1, 1), (2, 2), (5, 3)])
def test_never_more_than_max_surge_extra_lives_per_role(surge, at_once):
    c = FakeCluster()
    c.converge(spec(3, surge=surge))
    p = c.plan(spec(3, speed=7, surge=surge))
    assert len(launches(p)) == at_once and cancels(p) == []
    waits = [w.reason for w in p.recipes["r"].waiting.values()]
    assert waits == [WaitReason.ROLLOUT_BUDGET] * (3 - at_once)


def test_a_rollout_with_surge_converges_with_every_worker_on_the_new_spec_and_never_fewer_ready():
    c = FakeCluster()
    c.converge(spec(3))
    new = spec(3, speed=7)
    for _ in range(40):
        p = c.plan(new, now=1000.0)
        if not p.actions:
            break
        c.apply(p)
        live = {s.unit_key for s in c.steps.values()}
        assert len(live) == 3 and len(c.steps) <= 4  # desired + max_surge, and never a worker without a life
    want = {u.spec_hash for u in c.desired(new).recipes["r"].units}
    assert {s.spec_hash for s in c.steps.values()} == want and len(c.steps) == 3


def test_an_old_life_that_is_not_ready_is_stopped_at_once_and_its_successor_started_beside_it():
    c = FakeCluster()
    c.converge(spec(2))
    sick = next(s for s in c.steps.values() if s.index == 1)
    c.unready.add((sick.unit_key, 0))
    p = c.plan(spec(2, speed=7))
    assert ("agg_1", StopReason.SPEC_CHANGED) in cancels(p)
    assert ("agg_1", 1, PlaceReason.REPLACEMENT) in launches(p)
    assert ("agg_0", 1, PlaceReason.REPLACEMENT) in launches(p)  # the sick one spent no surge budget


def test_a_surge_life_that_died_is_tried_again_after_the_backoff():
    c = FakeCluster()
    c.converge(spec(1))
    c.apply(c.plan(spec(1, speed=7)))
    new = next(s for s in c.steps.values() if s.slot == 1)
    del c.steps[new.step_id]  # it crashed
    c.health[new.unit_key] = UnitHealth(launches=2, restarts=1, last_launch=50.0, last_exit=(1, 52.0))
    p = c.plan(spec(1, speed=7), now=55.0)
    w = p.recipes["r"].waiting["agg_0"]
    assert not p.actions and w.reason is WaitReason.BACKOFF and w.until == 62.0
    # the new life's next launch is a restart, through the role's restart policy
    assert launches(c.plan(spec(1, speed=7), now=62.0)) == [("agg_0", 1, PlaceReason.RELAUNCH)]
    c.health[new.unit_key] = UnitHealth(launches=4, restarts=2, last_launch=70.0, last_exit=(1, 71.0))
    capped = {"r": recipe((TEXT % {"workers": 1, "speed": 7, "surge": 1}).replace(
        "agg: {workers: 1, gpus: 1}", "agg: {workers: 1, gpus: 1, restart: {max_restarts: 2}}"))}
    p = c.plan(capped, now=500.0)
    w = p.recipes["r"].waiting["agg_0"]
    assert not p.actions and w.reason is WaitReason.GAVE_UP and "the old one keeps serving" in w.detail


def test_a_new_life_that_logs_a_fatal_line_or_never_gets_ready_goes_and_the_old_one_stays():
    c = FakeCluster()
    c.converge(spec(1))
    c.apply(c.plan(spec(1, speed=7)))
    new = next(s for s in c.steps.values() if s.slot == 1)
    c.unready.add((new.unit_key, 1))
    c.health[new.unit_key] = UnitHealth(launches=2, last_launch=0.0, fatal="CUDA error: out of memory")
    p = c.plan(spec(1, speed=7), now=10.0)
    assert cancels(p) == [("agg_0", StopReason.FATAL_LOG)] and p.actions[0].step_id == new.step_id
    c.health[new.unit_key] = UnitHealth(launches=2, last_launch=0.0, watched_since=0.0)
    p = c.plan(spec(1, speed=7), now=10.0)
    w = p.recipes["r"].waiting["agg_0"]
    assert not p.actions and w.reason is WaitReason.SURGE_STARTING and w.until == 1800.0
    assert p.requeue_after == pytest.approx(0.5)  # a life starting is motion
    assert cancels(c.plan(spec(1, speed=7), now=1801.0)) == [("agg_0", StopReason.STARTUP_TIMEOUT)]


def test_a_worker_waiting_its_turn_beside_its_serving_old_life_is_not_motion():
    c = FakeCluster()
    c.converge(spec(2))
    c.apply(c.plan(spec(2, speed=7)))  # agg_0 surges, agg_1 waits for the budget
    new = next(s for s in c.steps.values() if s.slot == 1)
    c.health[new.unit_key] = UnitHealth(launches=2, was_ready=True, ready_since=100.0, first_ready=100.0)
    p = c.plan(spec(2, speed=7), now=101.0)
    assert p.recipes["r"].waiting["agg_1"].reason is WaitReason.ROLLOUT_BUDGET
    assert p.requeue_after == pytest.approx(1.0)  # the hand-over's next step, not a 0.5 s poll


def test_without_surge_the_old_step_goes_first_and_the_successor_keeps_its_slot():
    no = {"r": recipe((TEXT % {"workers": 1, "speed": 7, "surge": 0}).replace("max_unavailable: 0", "max_unavailable: 1"))}
    c2 = FakeCluster()
    c2.converge({"r": recipe((TEXT % {"workers": 1, "speed": 10, "surge": 0}).replace(
        "max_unavailable: 0", "max_unavailable: 1"))})
    p = c2.plan(no)
    assert cancels(p) == [("agg_0", StopReason.SPEC_CHANGED)] and launches(p) == []
    c2.converge(no)
    assert [s.slot for s in c2.steps.values()] == [0]


def test_max_surge_and_max_unavailable_cannot_both_be_zero():
    from reconciler.errors import ReconcilerError

    with pytest.raises(ReconcilerError, match="max_surge and max_unavailable cannot both be 0"):
        spec(1, surge=0)


def _step(sid, index=0, slot=0, h="aaa", role="agg"):
    return Step(sid, "r", role, index, 0, h, ("n1",), pending="pending" in sid, slot=slot)


@pytest.mark.parametrize("steps, held, want", [
    ([], (False, False), 0),  # never launched
    ([], (False, True), 1),  # between lives, its ports are in slot 1
    ([_step("7.1", slot=1)], (False, False), 1),  # its life runs in slot 1
    ([_step("7.1", slot=0), _step("7.4", slot=1)], (True, True), 1),  # mid-surge: the newest
    ([_step("7.1", slot=0), _step("7.pending-agg_0-0", slot=1)], (True, False), 1),  # a launch in flight
    ([_step("6.3", slot=0)], (True, False), 1),  # moving off another allocation: beside it
])
def test_choose_slots(steps, held, want):
    assert choose_slots([("agg", 0)], steps, {("agg", 0): "7"}, {("agg", 0): held}) == {("agg", 0): want}


def test_surge_flips_only_workers_whose_steps_all_run_an_older_spec_with_the_other_slot_free():
    from reconciler.world import Unit

    def unit(index, h, slot=0):
        return Unit("r", "agg", index, (0,), ("n1",), (), {}, (), None, spec_hash=h, slot=slot)

    steps = [_step("7.1", 0, 0, "old"), _step("7.2", 1, 0, "new"), _step("7.3", 2, 0, "old"),
             _step("7.4", 2, 1, "new")]
    units = [unit(0, "new"), unit(1, "new"), unit(2, "old")]
    job = {("agg", i): "7" for i in range(3)}
    assert surge_flips(units, steps, job, 1) == {("agg", 0)}
    assert surge_flips(units, steps, job, 0) == set()


GPU = """\
name: g
model: {path: /m}
resources: {gpus_per_node: 8}
engine: sglang
frontend: {type: none}
roles:
  agg: {workers: 1, gpus: 4, args: {mem-fraction-static: %(mem)s}}
reconcile: {rollout: {surge_gpus: %(room)s, max_unavailable: %(down)d}}
"""


def gpu_spec(mem="0.8", room="false", down=0):
    return {"g": recipe(GPU % {"mem": mem, "room": room, "down": down}, "g")}


def visible(unit):
    return dict(unit.launches[0].env).get("CUDA_VISIBLE_DEVICES")


def test_a_gpu_engine_surges_onto_the_mirror_gpus_when_its_allocation_holds_them():
    c = FakeCluster()
    p = c.plan(gpu_spec(room="true"))
    assert p.actions[0].spec.gpus_per_node == 8  # the workers use 4: room for their surge lives
    c.converge(gpu_spec(room="true"))
    p = c.plan(gpu_spec(mem="0.7", room="true"))
    (launch,) = [a for a in p.actions if isinstance(a, LaunchStep)]
    assert launch.unit.slot == 1 and visible(launch.unit) == "4,5,6,7" and cancels(p) == []
    c.converge(gpu_spec(mem="0.7", room="true"), now=1000.0)
    (life,) = c.desired(gpu_spec(mem="0.7", room="true")).recipes["g"].units
    assert life.slot == 1 and visible(life) == "4,5,6,7"  # stays there: no second rollout
    assert not c.plan(gpu_spec(mem="0.7", room="true"), now=1000.0).actions


def test_a_gpu_engine_without_room_for_a_second_life_surges_onto_a_surge_allocation():
    c = FakeCluster()
    c.converge(gpu_spec())
    (old_job,) = c.allocs
    p = c.plan(gpu_spec(mem="0.7"))
    (submit,) = [a for a in p.actions if isinstance(a, SubmitAlloc)]
    assert "surge allocation beside job" in submit.describe() and cancels(p) == [] and launches(p) == []
    assert p.recipes["g"].waiting["agg_0"].reason is WaitReason.SURGE_ALLOCATION
    c.apply(p)
    (new_job,) = set(c.allocs) - {old_job}
    p = c.plan(gpu_spec(mem="0.7"))
    (launch,) = [a for a in p.actions if isinstance(a, LaunchStep)]
    assert launch.job_id == new_job and cancels(p) == []  # the new life on the surge allocation, the old one serves
    c.converge(gpu_spec(mem="0.7"), now=1000.0)
    assert list(c.allocs) == [new_job]  # the old job released once its worker moved
    (life,) = c.desired(gpu_spec(mem="0.7")).recipes["g"].units
    assert visible(life) == "0,1,2,3" and not c.plan(gpu_spec(mem="0.7"), now=1000.0).actions


def test_a_gpu_engine_without_room_is_rolled_in_place_when_max_unavailable_allows():
    c = FakeCluster()
    c.converge(gpu_spec(down=1))
    p = c.plan(gpu_spec(mem="0.7", down=1))
    assert cancels(p) == [("agg_0", StopReason.SPEC_CHANGED)] and launches(p) == []
    assert c.desired(gpu_spec(mem="0.7", down=1)).recipes["g"].no_room == frozenset({"agg_0"})
    c.converge(gpu_spec(mem="0.7", down=1))
    (life,) = c.desired(gpu_spec(mem="0.7", down=1)).recipes["g"].units
    assert life.slot == 0 and visible(life) == "0,1,2,3" and len(c.allocs) == 1


def test_a_surge_allocation_no_longer_needed_while_it_queues_is_cancelled():
    c = FakeCluster()
    c.converge(gpu_spec())
    (old_job,) = c.allocs
    c.pending = True
    c.apply(c.plan(gpu_spec(mem="0.7")))  # the surge allocation, queued
    (queued,) = set(c.allocs) - {old_job}
    assert not c.plan(gpu_spec(mem="0.7")).actions  # still wanted: nothing more
    p = c.plan(gpu_spec())  # the change is reverted
    assert [(type(a).__name__, a.job_id) for a in p.actions] == [("CancelAlloc", queued)]



def test_a_reverted_change_cancels_a_queued_surge_allocation_once_surge_gpus_came_later():
    """Found in review: surge_gpus turned on after the job was submitted (it holds 4, the spec now
    8), the queued surge allocation was kept after the change that asked for it was reverted. Only
    a job too small for the file's packing (not for the surge room) keeps a queued successor."""
    c = FakeCluster()
    c.converge(gpu_spec())
    c.converge(gpu_spec(room="true"))
    (old_job,) = c.allocs
    assert c.allocs[old_job].gpus == 4
    c.pending = True
    p = c.plan(gpu_spec(mem="0.7", room="true"))
    assert [a.spec.gpus_per_node for a in p.actions if isinstance(a, SubmitAlloc)] == [8]
    c.apply(p)
    (queued,) = set(c.allocs) - {old_job}
    p = c.plan(gpu_spec(room="true"))  # the change is reverted
    assert [(type(a).__name__, a.job_id) for a in p.actions] == [("CancelAlloc", queued)]

def test_no_surge_allocation_for_a_worker_whose_old_life_serves_nothing():
    c = FakeCluster()
    c.converge(gpu_spec())
    (step,) = c.steps.values()
    c.unready.add(step.unit_key)
    p = c.plan(gpu_spec(mem="0.7"))
    assert not [a for a in p.actions if isinstance(a, SubmitAlloc)]
    assert cancels(p) == [("agg_0", StopReason.SPEC_CHANGED)]  # replaced in place at once


FRONTED = """\
name: r
model: {path: /m}
resources: {gpus_per_node: 8}
engine: {type: mocker, speedup_ratio: %(speed)d}
frontend: {type: builtin, args: {poll-interval: %(poll)s}}
roles:
  agg: {workers: 1, gpus: 1}
reconcile: {rollout: {max_surge: 1, max_unavailable: 0}}
"""


@pytest.mark.parametrize("old_ready, routed", [(True, True), (False, False)])
def test_the_gateway_keeps_a_frontends_old_life_while_the_new_one_is_not_ready(old_ready, routed):
    """A frontend's new life (a surge here; a hand-over alike) is not Ready at its first ticks: its
    old life, still answering, stays the gateway's upstream; with neither alive, the new life's
    address is, unproven (the first to listen there is routed to at once)."""
    from reconciler.shell.gateway.sync import gateway_upstreams
    from reconciler.world import Observed

    def spec_of(poll):
        return {"r": recipe(FRONTED % {"speed": 10, "poll": poll})}

    c = FakeCluster()
    c.converge(spec_of(0.5))
    c.apply(c.plan(spec_of(0.2)))  # the router's new life starts beside the old one
    d = c.desired(spec_of(0.2)).recipes["r"]
    old = d.previous[("frontend", 0)]
    new = d.frontend
    assert new.slot != old.slot
    o = Observed((), (), {new.key: False}, {}, previous_ready={old.key: old_ready})
    # none alive: the gateway points at where the new life listens (unproven), not at nothing
    relaunch = ([f"{new.nodes[0]}:{new.health_port}"], True)
    assert gateway_upstreams(d, o) == (([f"{old.nodes[0]}:{old.health_port}"], False) if routed else relaunch)
    # one slow /health answer of the old life (Ready before, issue 32 item 9) keeps it the upstream;
    # judged dead (liveness_failures in a row) it goes
    for failures, kept in ((1, True), (3, False)):
        o = Observed((), (), {new.key: False}, {}, previous_ready={old.key: False},
                     previous_failures={old.key: failures})
        assert gateway_upstreams(d, o) == (([f"{old.nodes[0]}:{old.health_port}"], False) if kept else relaunch), failures


@pytest.mark.parametrize("failures, strict, routed", [
    (0, False, []),  # never Ready, or its probe failing long: not routed
    (1, False, [0]),  # one slow /health answer of a Ready old life: still routed
    (2, True, [0]),  # below the liveness threshold (3), the built-in router keeps it too
    (3, True, []),  # judged dead: it goes
])
def test_one_failed_probe_of_a_surging_workers_old_life_does_not_unroute_it(failures, strict, routed):
    """Issue 32 item 9: the old life of a one-worker role stands alone while its successor is not
    yet picked up; a single /health answer slower than the probe timeout took it out of the
    routers (previous_ready is this probe alone), so every request was a 503 until the next pass.
    An old life that was Ready stays routed below the liveness threshold, like a current one."""
    from reconciler.world import Observed
    from reconciler.shell.readiness import router_sync

    c = FakeCluster()
    c.converge(spec(1))
    old = next(iter(c.steps.values()))
    c.apply(c.plan(spec(1, speed=7)))
    d = c.desired(spec(1, speed=7)).recipes["r"]
    new = UnitHealth(launches=2, was_ready=not strict, first_ready=None if strict else 100.0,
                     ready_since=None if strict else 100.0)
    o = Observed((), (), {old.unit_key: not strict}, {old.unit_key: new},
                 previous_ready={old.unit_key: False}, previous_failures={old.unit_key: failures})
    # at 101 the new life (Ready since 100) is not picked up yet (surge_pickup_seconds 2): the old one serves
    assert [u.slot for u in router_sync.old_lives(d, o, 101.0, strict=strict)] == routed
