"""After an allocation is lost: a new one waits (bounded) while no node of its partition is usable
(submitted once one is back, it starts at once; submitted before, it waited for Slurm's next
scheduling pass: 26 s measured after a controller restarted with fresh state), and the lost
workers' backoff is cleared (they move, they are not crash-looping)."""

from __future__ import annotations

from reconciler.core.plan.nodes import SUBMIT_HOLD_S
from reconciler.drivers.state import StateDir
from reconciler.shell.cluster.nodes import NodeWatch
from reconciler.world import Alloc, AllocSpec


class Nodes:
    def __init__(self, states: dict[str, tuple[str, str]], pool: tuple[str, ...]):
        self.states, self.pool = states, pool

    def node_states(self, nodes):
        return {n: self.states[n] for n in nodes if n in self.states}

    def partition_nodes(self, partition):
        return self.pool


SPEC = AllocSpec("r", 0, 0, 1, 1)


def watch(tmp_path, states, pool=("n1",)):
    d = Nodes(states, pool)
    w = NodeWatch(StateDir(tmp_path / "state"), d)  # type: ignore[arg-type]
    return w, d


def test_no_usable_node_holds_the_submission_until_one_is_back(tmp_path):
    w, d = watch(tmp_path, {"n1": ("UNKNOWN", "")})
    lost = Alloc("7", "r", 0, 0, 1, "RUNNING", nodes=("n1",))
    assert w.lost(lost, "", 100.0) == {"n1": "UNKNOWN"}  # gone from the queue; the node not heard from
    why = w.hold_submission(SPEC, 101.0)
    assert why is not None and "n1: UNKNOWN" in why and f"{SUBMIT_HOLD_S:g}s" in why
    d.states["n1"] = ("IDLE", "")  # the node registered again
    w.tick(104.0)
    assert w.hold_submission(SPEC, 104.0) is None


def test_the_hold_is_bounded_and_never_applies_with_a_usable_node(tmp_path):
    w, d = watch(tmp_path, {"n1": ("DOWN", "Not responding"), "n2": ("IDLE", "")}, pool=("n1", "n2"))
    w.lost(Alloc("7", "r", 0, 0, 1, "RUNNING", nodes=("n1",)), "NODE_FAIL", 100.0)
    assert w.hold_submission(SPEC, 101.0) is None  # n2 can take it: submitted (n1 excluded)
    w2, _ = watch(tmp_path / "b", {"n1": ("DOWN", "Not responding")})
    w2.lost(Alloc("7", "r", 0, 0, 1, "RUNNING", nodes=("n1",)), "NODE_FAIL", 100.0)
    assert w2.hold_submission(SPEC, 100.0 + SUBMIT_HOLD_S - 1) is not None
    assert w2.hold_submission(SPEC, 100.0 + SUBMIT_HOLD_S) is None  # a real outage: it queues, in line


def test_a_lost_allocations_workers_lose_their_backoff_those_still_running_keep_it(tmp_path):
    """Found measuring the controller restart: a relaunch tried in the vanishing job counted as a
    restart, and the launch on the replacement waited 10 s of a backoff no exit of its own earned."""
    from types import SimpleNamespace as NS

    from reconciler.shell.cluster.lost_allocs import LostAllocations
    from reconciler.world import Observed, Step

    state = StateDir(tmp_path / "state")
    for unit in ("agg_0", "agg_1"):
        state.count_launch("r", unit, 1.0, restart=False)
        state.count_launch("r", unit, 2.0, restart=True)

    class Driver:
        def job_end(self, job_id):
            return ("NODE_FAIL", "None")

        def node_states(self, nodes):
            return {n: ("IDLE", "") for n in nodes}

        def partition_nodes(self, partition):
            return ("n1", "n2")

    d = Driver()
    losses = LostAllocations(state, d, NodeWatch(state, d))  # type: ignore[arg-type]
    gone = Alloc("7", "r", 0, 0, 1, "RUNNING", nodes=("n1",))
    kept = Alloc("8", "r", 1, 1, 1, "RUNNING", nodes=("n2",))
    losses.note(NS(observed=Observed((gone, kept), ()), now=10.0))  # type: ignore[arg-type]
    on_kept = Step("8.0", "r", "agg", 1, 0, "h")
    losses.note(NS(observed=Observed((kept,), (on_kept,)), now=11.0))  # type: ignore[arg-type]
    assert {u: r["backoff"] for u, r in state.launches("r").items()} == {"agg_0": 0, "agg_1": 1}
    assert any(e["kind"] == "AllocationLost" for e in map(__import__("json").loads,
               (state.root / "events.jsonl").read_text().splitlines()))
