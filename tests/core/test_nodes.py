"""core/plan/nodes: the suspect-node policy, as expectation tables."""

from __future__ import annotations

import pytest

from reconciler.core.plan.nodes import (
    Suspect, cooldown_ends, excluded, lost_nodes, node_usable, stale_pending, to_release, update,
)
from reconciler.world import Alloc

COOL = 60.0


@pytest.mark.parametrize("state, usable", [
    ("IDLE", True), ("MIXED", True), ("ALLOCATED", True), ("COMPLETING", True), ("idle*", True),
    ("DOWN", False), ("DOWN+NOT_RESPONDING", False), ("IDLE+DRAIN", False), ("MIXED+DRAIN", False),
    ("ALLOCATED+NOT_RESPONDING", False), ("FUTURE", False), ("UNKNOWN", False), ("IDLE+POWERED_DOWN", False),
    ("IDLE+CLOUD", True),
])
def test_node_usable(state, usable):
    assert node_usable(state) is usable


@pytest.mark.parametrize("job_state, nodes, states, want", [
    # an allocation that ended any other way lost no node
    ("CANCELLED", ("a",), {"a": ("DOWN", "x")}, {}),
    ("TIMEOUT", ("a",), {"a": ("DOWN", "x")}, {}),
    ("COMPLETED", ("a",), {}, {}),
    # the node Slurm reports down is the one, with Slurm's reason
    ("NODE_FAIL", ("a", "b"), {"a": ("IDLE", ""), "b": ("DOWN", "test down")}, {"b": "test down"}),
    ("NODE_FAIL", ("a", "b"), {"a": ("DOWN+NOT_RESPONDING", "Not responding"), "b": ("MIXED", "")},
     {"a": "Not responding"}),
    ("BOOT_FAIL", ("a",), {"a": ("DOWN", "")}, {"a": "DOWN"}),
    # every node back already (ReturnToService): Slurm no longer says which; all are suspect
    ("NODE_FAIL", ("a", "b"), {"a": ("IDLE", ""), "b": ("IDLE", "")},
     {"a": "job ended NODE_FAIL; Slurm reports the node back already",
      "b": "job ended NODE_FAIL; Slurm reports the node back already"}),
    ("NODE_FAIL", ("a",), {}, {"a": "job ended NODE_FAIL; Slurm reports the node back already"}),
    # just left the queue, end unknown: only what Slurm reports down now
    ("", ("a", "b"), {"a": ("IDLE", ""), "b": ("DOWN", "test down")}, {"b": "test down"}),
    ("", ("a", "b"), {"a": ("IDLE", ""), "b": ("IDLE", "")}, {}),
])
def test_lost_nodes(job_state, nodes, states, want):
    assert lost_nodes(job_state, nodes, states) == want


S = Suspect("b", "test down", 100.0)
BACK = Suspect("b", "test down", 100.0, back_at=110.0)


@pytest.mark.parametrize("before, lost, states, now, want", [
    # a new loss enters, not yet back
    ({}, {"b": "test down"}, {"b": ("DOWN", "test down")}, 100.0, {"b": S}),
    # a new loss whose node is already back: the cool-down starts now
    ({}, {"b": "test down"}, {"b": ("IDLE", "")}, 100.0, {"b": Suspect("b", "test down", 100.0, back_at=100.0)}),
    # not asked this tick: unchanged
    ({"b": BACK}, {}, {}, 500.0, {"b": BACK}),
    # still down: Slurm's newest reason
    ({"b": S}, {}, {"b": ("DOWN+NOT_RESPONDING", "Not responding")}, 105.0,
     {"b": Suspect("b", "Not responding", 100.0)}),
    # back: the cool-down starts
    ({"b": S}, {}, {"b": ("IDLE", "")}, 110.0, {"b": BACK}),
    # in its cool-down
    ({"b": BACK}, {}, {"b": ("IDLE", "")}, 110.0 + COOL - 1, {"b": BACK}),
    # cool-down over: usable again
    ({"b": BACK}, {}, {"b": ("MIXED", "")}, 110.0 + COOL, {}),
    # fails again during its cool-down: starts over
    ({"b": BACK}, {}, {"b": ("DOWN", "again")}, 120.0, {"b": Suspect("b", "again", 100.0)}),
    ({"b": BACK}, {"b": "again"}, {"b": ("IDLE", "")}, 120.0, {"b": Suspect("b", "again", 120.0, back_at=120.0)}),
    # others are untouched
    ({"b": BACK}, {"c": "x"}, {"c": ("DOWN", "x")}, 111.0, {"b": BACK, "c": Suspect("c", "x", 111.0)}),
])
def test_update(before, lost, states, now, want):
    assert update(before, lost, states, now, COOL) == want


def test_excluded_and_cooldown_end():
    s = {"c": Suspect("c", "x", 1.0), "b": BACK, "a": Suspect("a", "y", 1.0, back_at=130.0)}
    assert excluded(s) == ("a", "b", "c")
    assert cooldown_ends(s, COOL) == 110.0 + COOL
    assert cooldown_ends({"c": Suspect("c", "x", 1.0)}, COOL) is None
    assert excluded({}) == ()


def alloc(job: str, state: str, nodes=(), count=1, reason="") -> Alloc:
    return Alloc(job, "r", 0, 0, count, state, reason, tuple(nodes))


@pytest.mark.parametrize("previous, current, want", [
    ({}, [alloc("1", "PENDING", reason="Resources")], {}),  # never ran: an ordinary queued job
    ({"1": alloc("1", "PENDING")}, [alloc("1", "PENDING")], {}),
    ({"1": alloc("1", "RUNNING", ("a",))}, [alloc("1", "RUNNING", ("a",))], {}),
    ({"1": alloc("1", "RUNNING", ("a",))}, [alloc("1", "PENDING", reason="BeginTime")],
     {"1": "requeued by Slurm after running on a (BeginTime)"}),
    ({"1": alloc("1", "RUNNING", ("a", "b"), 2)}, [alloc("1", "REQUEUED", count=2)],
     {"1": "requeued by Slurm after running on a,b (REQUEUED)"}),
    ({}, [alloc("1", "RUNNING", ("a",), count=2)], {"1": "runs on 1 of its 2 nodes"}),
    ({}, [alloc("1", "RUNNING", (), count=2)], {}),  # no node list yet: not a shrink
])
def test_to_release(previous, current, want):
    assert to_release(previous, current) == want


@pytest.mark.parametrize("pending, now, want", [
    ({}, (), []),
    ({"1": ("a",)}, ("a",), []),  # still suspect: keep waiting
    ({"1": ("a",)}, ("a", "b"), []),  # more suspects now: the running ones are not placed there anyway
    ({"1": ("a", "b")}, ("b",), ["1"]),  # a is back: resubmit without it
    ({"1": ("a",), "2": ("c",)}, (), ["1", "2"]),
])
def test_stale_pending(pending, now, want):
    assert stale_pending(pending, now) == want
