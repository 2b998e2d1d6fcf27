"""The in-flight and cancel graces, and the tick's port assignment (bind failures, release)."""

from __future__ import annotations

import pytest

from builders import desired, desired_recipe, observed, step, unit
from reconciler.core.grace import CANCEL_GRACE, INFLIGHT_GRACE, apply_grace
from reconciler.core.portplan import reassign_after_bind_failures, release_unused
from reconciler.core.ports import NodePortAllocator
from reconciler.world import InFlight

PSEUDO = step(index=1, num=99, pending=True)


@pytest.mark.parametrize("what, steps, cancelled, inflight, now, terminating, pending, kept, failed", [
    ("a fresh cancel marks the step terminating", [step()], {"100.0": 90.0}, [], 100.0, ["100.0"], [], 0, 0),
    ("a cancel past its grace is forgotten: cancel again", [step()], {"100.0": 100.0 - CANCEL_GRACE - 1}, [], 100.0,
     [], [], 0, 0),
    ("a cancelled step that is gone is forgotten", [], {"100.0": 99.0}, [], 100.0, [], [], 0, 0),
    ("a launch in flight stands in for its step", [], {}, [InFlight(PSEUDO, 95.0)], 100.0, [], ["100.99"], 1, 0),
    ("once squeue shows it, the pseudo step goes", [step(index=1, num=3)], {}, [InFlight(PSEUDO, 95.0)], 100.0,
     [], [], 0, 0),
    ("a launch that never showed is given up", [], {}, [InFlight(PSEUDO, 100.0 - INFLIGHT_GRACE - 1)], 100.0,
     [], [], 0, 0),
    ("a launcher that exited before its step showed: failed", [], {}, [InFlight(PSEUDO, 99.0, exited=1)], 100.0,
     [], [], 0, 1),
])
def test_grace(what, steps, cancelled, inflight, now, terminating, pending, kept, failed):
    v = apply_grace(steps, cancelled, inflight, now)
    assert [s.step_id for s in v.steps if s.terminating] == terminating
    assert [s.step_id for s in v.steps if s.pending] == pending
    assert (len(v.inflight), len(v.failed_launches)) == (kept, failed)
    assert set(v.cancelled) == set(terminating)


def test_a_bind_failure_moves_the_worker_once_and_blocks_the_taken_port():
    ports = NodePortAllocator(20000, 20010)
    p = ports.allocate("n1", "r/agg_0", "http")
    failed = {"r/agg_0": {"n1": {"http": p}}}
    moved = reassign_after_bind_failures(ports, failed, now=1000.0)
    assert [(m.owner, m.taken) for m in moved] == [("r/agg_0", (("n1", p),))]
    again = ports.allocate("n1", "r/agg_0", "http")
    assert again != p
    assert reassign_after_bind_failures(ports, failed, now=1001.0) == ()  # the same failed life: already moved
    other = ports.allocate("n1", "s/agg_0", "http")
    assert other != p  # blocked for everyone
    ports.now = 1000.0 + 3601
    ports.release("s/agg_0")
    assert p in {ports.allocate("n1", f"t/agg_{i}", "http") for i in range(9)}  # the block ended


def test_unused_ports_are_released_but_not_while_the_prune_guard_holds():
    ports = NodePortAllocator(20000, 20010)
    for owner in ("r/agg_0", "r/agg_1", "r/agg_7", "gone/agg_0", "held/agg_0"):
        ports.allocate("n1", owner, "http")
    d = desired(desired_recipe(unit(index=0), waiting=[("agg", 1)]), held={"held": "why"})
    o = observed(step(index=7))  # still running though no longer desired
    assert release_unused(ports.copy(), d, o, refused_prune=True) == ()
    assert release_unused(ports, d, o, refused_prune=False) == ("gone/agg_0",)
    assert ports.owners() == {"r/agg_0", "r/agg_1", "r/agg_7", "held/agg_0"}


def test_a_copy_is_independent():
    ports = NodePortAllocator(20000, 20010)
    ports.allocate("n1", "r/agg_0", "http")
    c = ports.copy(now=5.0)
    c.allocate("n1", "r/agg_1", "http")
    assert ports.owners() == {"r/agg_0"} and c.owners() == {"r/agg_0", "r/agg_1"} and c.now == 5.0
