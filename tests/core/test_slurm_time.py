"""The Slurm-time policies as expectation tables: reservations (core/plan/reservations.py), pending
explanations (pending.py), bad-node quarantine (quarantine.py), the bound on every exclusion
(exclusion.py), and the hand-over against the granted limit and job deadlines (allocations.py)."""

from __future__ import annotations

import dataclasses

import pytest

from builders import step, unit
from reconciler.core.plan import CancelStep, LaunchStep, PlaceReason, StopReason
from reconciler.core.plan.allocations import time_left
from reconciler.core.plan.exclusion import placeable_exclusion
from reconciler.core.plan.pending import PendingInfo, start_due, words
from reconciler.core.plan.quarantine import Failure, Policy, Quarantined, failures, step as qstep
from reconciler.core.plan.reservations import Member, Reservation, includes, reserved_nodes, threat
from reconciler.world import Alloc, Observed, UnitHealth

ME = Member("alice", "acct")


def res(name="maint", start=1000.0, end=2000.0, nodes=("n1",), users=("nobody",), accounts=()):
    return Reservation(name, start, end, frozenset(nodes), frozenset(users), frozenset(accounts))


@pytest.mark.parametrize("r, m, want", [
    (res(), ME, False),
    (res(users=("alice",)), ME, True),
    (res(users=("-bob",)), ME, True),  # everyone but bob
    (res(users=("-alice",)), ME, False),
    (res(users=(), accounts=("acct",)), ME, True),
    (res(users=(), accounts=("other",)), ME, False),
    (res(name="mine"), Member("alice", None, frozenset({"mine"})), True),  # submitted into it
])
def test_includes(r, m, want):
    assert includes(r, m) is want


@pytest.mark.parametrize("nodes, end, rs, now, want", [
    # starts before the job's end, on its node: the job must be gone by its start
    (("n1",), 5000.0, [res()], 500.0, 1000.0),
    # after the job's end: no threat
    (("n1",), 900.0, [res()], 500.0, None),
    # unlimited job: any reservation over its node
    (("n1",), None, [res(start=1e9, end=2e9)], 500.0, 1e9),
    # another node, or over already, or including us: none
    (("n2",), 5000.0, [res()], 500.0, None),
    (("n1",), 5000.0, [res(end=400.0, start=100.0)], 500.0, None),
    (("n1",), 5000.0, [res(users=("alice",))], 500.0, None),
    # already active over our running job (created over it): its start, in the past -> hand over now
    (("n1",), 5000.0, [res(start=100.0)], 500.0, 100.0),
    # the earliest of two
    (("n1", "n2"), 9000.0, [res(), res("b", start=700.0, nodes=("n2",))], 500.0, 700.0),
])
def test_threat(nodes, end, rs, now, want):
    got = threat(nodes, end, rs, now, ME)
    assert (got[0] if got else None) == want


def test_threat_names_the_reservation_and_its_nodes():
    (_, why) = threat(("n1", "n2"), None, [res(nodes=("n1", "n3"))], 0.0, ME)
    assert why.startswith("reservation maint takes n1 from ")


@pytest.mark.parametrize("rs, now, life, want", [
    ([res()], 500.0, 600.0, ["n1"]),  # starts within the life
    ([res()], 500.0, 400.0, []),  # starts after it
    ([res()], 500.0, None, ["n1"]),  # unlimited life
    ([res(start=100.0)], 500.0, 10.0, ["n1"]),  # active now
    ([res(end=400.0, start=100.0)], 500.0, None, []),  # over
    ([res(users=("alice",))], 500.0, None, []),  # ours
    ([res("late", start=1500.0, nodes=("n2",)), res()], 0.0, None, ["n1", "n2"]),  # soonest first
])
def test_reserved_nodes(rs, now, life, want):
    assert reserved_nodes(rs, now, life, ME) == want


@pytest.mark.parametrize("wanted, nodes, need, kept, dropped", [
    (["a"], ["a", "b", "c"], 1, ("a",), ()),
    (["a", "b"], ["a", "b", "c"], 1, ("a", "b"), ()),
    (["a", "b", "c"], ["a", "b", "c"], 1, ("a", "b"), ("c",)),  # never all: one node must remain
    (["a", "b"], ["a", "b", "c"], 2, ("a",), ("b",)),  # a 2-node allocation needs two
    (["c", "a", "b"], ["a", "b", "c"], 3, (), ("c", "a", "b")),
    (["x", "a"], ["a", "b"], 1, ("x", "a"), ()),  # a node outside the partition costs nothing
    (["a", "a", "b"], ["a", "b", "c"], 1, ("a", "b"), ()),  # duplicates count once
    (["a", "b", "c"], [], 1, ("a", "b", "c"), ()),  # partition unknown: kept
])
def test_placeable_exclusion(wanted, nodes, need, kept, dropped):
    assert placeable_exclusion(wanted, nodes, need) == (kept, dropped)


@pytest.mark.parametrize("reason, want", [
    ("Resources", "the nodes or GPUs it needs are in use; it starts when they free up"),
    ("Priority", "jobs with a higher priority are ahead of it in the queue"),
    ("AssocGrpGRES", "its account has reached its GPU (GRES) limit; it starts when the account's other jobs end"),
    ("ReqNodeNotAvail, UnavailableNodes:rnode1",
     "a node it may use is not available (down, drained or reserved) (UnavailableNodes:rnode1)"),
    ("Reservation", "it waits for its reservation to start"),
    ("SomethingNew", "Slurm's reason: SomethingNew"),
    ("", "Slurm gives no reason"),
])
def test_words(reason, want):
    assert words(reason) == want


@pytest.mark.parametrize("asked, submitted, now, due", [
    (None, 0.0, 0.0, True),  # never asked
    (10.0, 9.5, 10.5, False),  # at least PENDING_MIN
    (10.0, 9.5, 11.0, True),
    (100.0, 0.0, 140.0, False),  # half the age when last asked: 50 s
    (100.0, 0.0, 150.0, True),
    (100.0, None, 101.0, True),
])
def test_start_due(asked, submitted, now, due):
    assert start_due(asked, submitted, now) is due


def test_pending_explanation():
    p = PendingInfo("12", 0, "Resources", 1000.0 + 300, 1000.0 - 45)
    assert p.explain(1000.0) == ("allocation 0 (job 12) pending 45s: Resources — the nodes or GPUs it needs are "
                                 "in use; it starts when they free up; Slurm expects it to start at "
                                 "1970-01-01T00:21:40Z (in 5m)")
    d = p.doc(1000.0)
    assert (d["reason"], d["expectedStart"], d["pendingSeconds"]) == ("Resources", "1970-01-01T00:21:40Z", 45)
    assert "no start estimate" in PendingInfo("12", 0, "Priority", None, None).explain(0.0)


P = Policy(threshold=3, window=100.0, cooldown=50.0)


def F(node, at, what="fatal log line"):
    return Failure(node, at, what, "r/agg_0")


@pytest.mark.parametrize("history, quarantined, new, now, want_hist, want_q", [
    # two failures: counted, not quarantined
    ([F("a", 0)], {}, [F("a", 10)], 10.0, [F("a", 0), F("a", 10)], {}),
    # the third within the window: quarantined until now + cool-down; its failures forgotten
    ([F("a", 0), F("a", 10)], {}, [F("a", 20)], 20.0, [], {"a": 70.0}),
    # the first is out of the window: only two count
    ([F("a", 0), F("a", 10)], {}, [F("a", 105)], 105.0, [F("a", 10), F("a", 105)], {}),
    # failures on different nodes do not add up
    ([F("a", 0), F("b", 10)], {}, [F("c", 20)], 20.0, [F("a", 0), F("b", 10), F("c", 20)], {}),
    # a quarantined node's new failures are not counted; it leaves at the end of its cool-down
    ([], {"a": Quarantined("a", 0, 50.0, "x")}, [F("a", 20)], 20.0, [], {"a": 50.0}),
    ([], {"a": Quarantined("a", 0, 50.0, "x")}, [], 50.0, [], {}),
])
def test_quarantine_step(history, quarantined, new, now, want_hist, want_q):
    hist, q = qstep(history, quarantined, new, now, P)
    assert hist == want_hist and {n: x.until for n, x in q.items()} == want_q


def test_quarantine_says_why():
    _, q = qstep([F("a", 0), F("a", 1, "launch failed")], {}, [F("a", 2)], 2.0, P)
    assert q["a"].why == "3 worker failures in 100s (fatal log line, launch failed; r/agg_0)"


def test_failures_are_charged_to_the_nodes_of_the_failing_life():
    u = unit()  # agg_0 on n0-0
    s = step()
    fatal = CancelStep(s.step_id, "r", "agg_0", StopReason.FATAL_LOG)
    other = CancelStep(s.step_id, "r", "agg_0", StopReason.SCALED_DOWN)
    crashed = UnitHealth(launches=1, last_launch=0.0, last_exit=(3, 5.0))
    stopped = dataclasses.replace(crashed, stopped_for="fatal log line")
    relaunch = LaunchStep(u, u.launches[0], "100", PlaceReason.RELAUNCH, 1)
    obs = Observed(steps=(s,), health={u.key: crashed})
    assert [f.node for f in failures([fatal], obs, [], 9.0)] == ["n0-0"]
    assert failures([other], obs, [], 9.0) == []
    assert [f.what for f in failures([relaunch], obs, [], 9.0)] == ["exited 3"]
    # a life we stopped ourselves is charged by its stop, not again by its relaunch
    assert failures([relaunch], Observed(steps=(s,), health={u.key: stopped}), [], 9.0) == []
    # exited because another process holds one of its ports: it moves to other ports, the node is
    # not charged (a user's review saw a healthy node quarantined for three port conflicts)
    assert failures([relaunch], obs, [], 9.0, bind_failed=frozenset({"r/agg_0"})) == []
    assert [f.what for f in failures([relaunch], obs, [], 9.0, bind_failed=frozenset({"r/agg_1"}))] == ["exited 3"]
    assert [(f.node, f.what) for f in failures([], obs, [dataclasses.replace(s, pending=True)], 9.0)] == [
        ("n0-0", "launch failed")]


def test_a_lost_rank_charges_the_node_whose_rank_is_gone():
    survivor = step(rank=0)  # rank 1 (on n0-1) is gone
    stop = CancelStep(survivor.step_id, "r", "agg_0", StopReason.RANK_LOST)
    obs = Observed(steps=(survivor,))
    got = failures([stop], obs, [], 1.0, {("r", "agg_0"): ("n0-0", "n0-1")})
    assert [(f.node, f.what) for f in got] == [("n0-1", "lost rank")]  # not the survivor's node


@pytest.mark.parametrize("tl, deadline, now, want", [
    ("10:00", None, 0.0, 600.0),
    ("10:00", (100.0, "reservation m takes n1 from X"), 0.0, 100.0),  # sooner than its limit
    ("1:00", (100.0, "reservation m"), 0.0, 60.0),  # its limit comes first
    ("UNLIMITED", (100.0, "reservation m"), 50.0, 50.0),
    ("UNLIMITED", None, 0.0, None),
])
def test_time_left(tl, deadline, now, want):
    a = Alloc("5", "r", 0, 0, 1, "RUNNING", nodes=("n1",), time_left=tl)
    obs = Observed(allocs=(a,), deadlines={"5": deadline} if deadline else {})
    assert time_left(a, obs, now)[0] == want
