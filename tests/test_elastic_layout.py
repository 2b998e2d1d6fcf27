"""Where the autoscaler's workers go (desired/elastic.py): the file's workers never move, extra
workers on nodes and allocations of their own, allocations sized whatever the count, and no worker
placed on GPUs its job does not hold. Expectation tables on hand-built recipes, a property over
counts, and the whole pipeline against the in-memory cluster (which refuses a launch on GPUs the
job does not hold)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fakes import FakeCluster, recipe
from support.autoscale import converge
from reconciler.core.plan import CancelAlloc, SubmitAlloc, plan
from reconciler.desired.build import build
from reconciler.desired.elastic import EXTRA_BASE as X
from reconciler.desired.placement import place, placement
from reconciler.desired.scale import Scale
from reconciler.desired.services.layout import instance_ordinals
from reconciler.desired.topology import topology
from reconciler.world import Alloc, Observed

# prefill on node 0 GPU 0, decode colocated after it: GPUs 1-2 and 3-4 (one-node split, 8 GPUs)
PACKED = """\
name: r
model: {path: /m}
resources: {gpus_per_node: 8}
engine: mocker
frontend: {type: builtin}
roles:
  prefill: {workers: 1, gpus: 1}
  decode: {workers: 2, gpus: 2}
reconcile:
  autoscale:
    roles:
      decode: {min: 1, max: 4, target: {waiting_per_worker: 2}}
"""

# prefill: 2 whole-node workers on nodes 0-1; decode: 2 two-node workers on nodes 2-5; etcd and NATS
# on srtctl's dedicated node 6
DISAGG = """\
name: d
model: {path: /m}
resources: {gpus_per_node: 4}
engine: mocker
frontend: {type: dynamo}
dynamo: {request_plane: nats}
infra: {etcd_nats_dedicated_node: true}
roles:
  prefill: {workers: 2, gpus: 4, nodes: 2}
  decode: {workers: 2, gpus: 8, nodes: 4}
reconcile:
  autoscale:
    roles:
      prefill: {min: 1, max: 3, target: {waiting_per_worker: 2}}
      decode: {min: 1, max: 5, target: {itl_p90_ms: 40}}
"""


def layout(text: str, **counts: int) -> dict[str, tuple]:
    top = topology(recipe(text), counts=counts or None)
    return {ep.name: (ep.nodes, ep.gpus) for ep in top.endpoints} | {"dedicated": top.dedicated}


LAYOUTS = [
    ("the file's count: the file's layout", PACKED, {},
     {"prefill_0": ((0,), (0,)), "decode_0": ((0,), (1, 2)), "decode_1": ((0,), (3, 4)), "dedicated": None}),
    ("above it: the extra workers on nodes of their own, GPUs from 0", PACKED, {"decode": 4},
     {"prefill_0": ((0,), (0,)), "decode_0": ((0,), (1, 2)), "decode_1": ((0,), (3, 4)),
      "decode_2": ((X,), (0, 1)), "decode_3": ((X + 1,), (0, 1)), "dedicated": None}),
    ("below it: the highest index goes, the rest stay put", PACKED, {"decode": 1},
     {"prefill_0": ((0,), (0,)), "decode_0": ((0,), (1, 2)), "dedicated": None}),
    ("extra prefill: from EXTRA_BASE on, in a block sized for its max (3 - 2 = 1 node)", DISAGG,
     {"prefill": 3},
     {"prefill_0": ((0,), (0, 1, 2, 3)), "prefill_1": ((1,), (0, 1, 2, 3)), "prefill_2": ((X,), (0, 1, 2, 3)),
      "decode_0": ((2, 3), (0, 1, 2, 3)), "decode_1": ((4, 5), (0, 1, 2, 3)), "dedicated": 6}),
    ("extra decode: two-node spans after the prefill block, whatever prefill's count", DISAGG,
     {"prefill": 1, "decode": 4},
     {"prefill_0": ((0,), (0, 1, 2, 3)), "decode_0": ((2, 3), (0, 1, 2, 3)), "decode_1": ((4, 5), (0, 1, 2, 3)),
      "decode_2": ((X + 1, X + 2), (0, 1, 2, 3)), "decode_3": ((X + 3, X + 4), (0, 1, 2, 3)),
      "dedicated": 6}),
    ("at zero nothing is held, the services' node neither", DISAGG, {"prefill": 0, "decode": 0},
     {"dedicated": None}),
]


@pytest.mark.parametrize("why,text,counts,want", LAYOUTS, ids=[c[0] for c in LAYOUTS])
def test_layout_at_counts(why, text, counts, want):
    assert layout(text, **counts) == want


@settings(max_examples=60, deadline=None)
@given(pre=st.integers(0, 3), dec=st.integers(0, 5))
def test_a_count_never_moves_a_file_worker_another_role_or_the_dedicated_node(pre, dec):
    file = layout(DISAGG)
    got = layout(DISAGG, prefill=pre, decode=dec)
    extra: list[int] = []
    for name, where in got.items():
        if name == "dedicated":
            continue
        if name in file:
            assert where == file[name], f"{name} moved"
        else:
            extra += where[0]
    assert min(extra, default=X) >= X, "an extra worker on an ordinal of the file's (or the dedicated node)"
    assert len(extra) == len(set(extra)), "two extra workers share a node ordinal"
    assert got["dedicated"] == (6 if pre + dec else None)
    # the same count of one role, whatever the other's: the same places
    other = layout(DISAGG, prefill=pre, decode=5 - dec)
    assert {k: v for k, v in got.items() if k.startswith("prefill")} == \
        {k: v for k, v in other.items() if k.startswith("prefill")}


def allocs_of(text: str, live: list[Alloc] = (), **counts: int) -> list[tuple[int, int, int]]:
    top = topology(recipe(text), counts=counts or None)
    return [(s.start, s.count, s.gpus_per_node) for s in placement(top, list(live), []).allocs]


def test_each_extra_worker_is_an_allocation_of_its_own_sized_for_it():
    assert allocs_of(PACKED) == [(0, 1, 5)]
    assert allocs_of(PACKED, decode=4) == [(0, 1, 5), (X, 1, 2), (X + 1, 1, 2)]
    assert allocs_of(DISAGG, decode=4) == [(0, 7, 4), (X + 1, 2, 4), (X + 3, 2, 4)]


def test_a_file_node_is_held_as_the_file_packs_it_whatever_the_count():
    """decode at 1: node 0 still holds decode_1's GPUs, so a successor (or a new job after a
    failure) holds them when the count comes back to 2 — and the running job is kept as it is."""
    assert allocs_of(PACKED, decode=1) == [(0, 1, 5)]
    job = Alloc("7", "r", 0, 0, 1, "RUNNING", "None", ("n1",), gpus=5)
    assert allocs_of(PACKED, [job], decode=1) == [(0, 1, 5)]


def test_a_worker_is_never_placed_on_gpus_its_job_does_not_hold():
    """A job submitted for fewer GPUs than a worker on its node uses (an older layout) does not
    hold it: the worker waits, says why, and a successor sized for it is submitted."""
    r = recipe(PACKED)
    top = topology(r)
    short = Alloc("7", "r", 0, 0, 1, "RUNNING", "None", ("n1",), gpus=3)
    _, keep, at, unplaceable, resize, _ = place(r, top.layout, list(top.endpoints), [short])
    assert set(at) == {("prefill", 0), ("decode", 0)} and keep == ["7"]
    assert list(unplaceable) == ["decode_1"]
    assert unplaceable["decode_1"] == ("uses GPUs 3-4, job 7 holds 3 per node: it waits for a successor sized "
                                       "for it (a hand-over)")
    assert resize == {0: "decode_1 uses GPUs 3-4, job 7 holds 3 per node"}
    d = build({"r": r}, Observed((short,), ()), FakeCluster().ports, Path("/state"), "py", 1)
    p = plan(d, Observed((short,), ()), 0.0)
    assert "job 7 holds 3 per node" in p.recipes["r"].waiting["decode_1"].detail
    (succ,) = [a for a in p.actions if isinstance(a, SubmitAlloc)]
    assert (succ.spec.index, succ.spec.gpus_per_node) == (0, 5)


def test_services_on_worker_nodes_follow_the_extra_workers():
    """One instance per node of a worker-node placement: an extra worker's node gets one too,
    indexed by its ordinal (past every position, the same whichever other extras exist)."""
    text = PACKED + "services:\n  - {name: side, type: generic, command: [side], placement: {node: decode}}\n" \
                    "  - {name: every, type: generic, command: [every], placement: {node: all}}\n"
    for counts, want in (({}, [(0, 0)]), ({"decode": 1}, [(0, 0)]), ({"decode": 4}, [(0, 0), (X, X), (X + 1, X + 1)])):
        top = topology(recipe(text), counts=counts or None)
        side, every = (s for s in top.services if s.name in ("side", "every"))
        assert instance_ordinals(top.layout, side) == want
        assert instance_ordinals(top.layout, every) == want


def test_up_down_and_up_again_moves_nothing_that_runs_and_releases_exactly_the_extra():
    r = recipe(PACKED)
    c = FakeCluster()
    converge(c, r, None)
    first = dict(c.steps)
    converge(c, r, {"r": Scale({"decode": 4})})
    assert set(first) <= set(c.steps), "scaling up moves nothing that runs"
    assert len(c.allocs) == 3
    extra_jobs = {j for j, a in c.allocs.items() if a.start > 0}
    # down to 1: decode_3 and decode_2 go with their jobs, decode_1 goes and node 0 stays as it was
    sc = {"r": Scale({"decode": 1})}
    d = build({"r": r}, c.observed(), c.ports, Path("/state"), "py", 1, scale=sc)
    p = plan(d, c.observed(d), 0.0)
    assert {a.job_id for a in p.actions if isinstance(a, CancelAlloc)} == extra_jobs
    assert not [a for a in p.actions if isinstance(a, SubmitAlloc)]
    converge(c, r, sc)
    assert [a.gpus for a in c.allocs.values()] == [5]
    # and back to 2: decode_1 on the GPUs node 0's job still holds, no allocation submitted
    d = build({"r": r}, c.observed(), c.ports, Path("/state"), "py", 1, scale={"r": Scale({"decode": 2})})
    assert not [a for a in plan(d, c.observed(d), 0.0).actions if isinstance(a, SubmitAlloc)]
    converge(c, r, {"r": Scale({"decode": 2})})
    stayed = {sid for sid, st in first.items() if (st.role, st.index) != ("decode", 1)}
    assert len(stayed) == len(first) - 1 and stayed <= set(c.steps), "only decode_1 went and came back"
    assert sorted((st.role, st.index) for st in c.steps.values()) == \
        sorted((st.role, st.index) for st in first.values())


def settle(c: FakeCluster, r, sc=None) -> dict:
    """Converge, then the last plan's waiting units (none when everything that is wanted runs)."""
    converge(c, r, sc)
    d = build({"r": r}, c.observed(), c.ports, Path("/state"), "py", 1, scale=sc)
    return dict(plan(d, c.observed(d), 0.0).recipes["r"].waiting)


EVERY = """\
name: r
model: {path: /m}
resources: {gpus_per_node: 8}
engine: mocker
frontend: {type: builtin}
roles:
  agg: {workers: 3, gpus: 8}
reconcile:
  autoscale:
    scale_to_zero_after_seconds: 60
    roles:
      agg: {min: 0, max: 4, target: {waiting_per_worker: 2}}
services:
  - {name: every, type: generic, command: [every], placement: {node: all}}
"""


def test_a_service_on_every_node_waits_for_no_node_the_count_does_not_hold():
    """Found in review: at 1 worker after zero, ``node: all`` listed the file's three nodes and two
    instances waited for allocations that were never asked for (the recipe never Ready again)."""
    r, c = recipe(EVERY), FakeCluster()
    assert settle(c, r) == {}
    for n in (0, 1, 4, 2):
        assert settle(c, r, {"r": Scale({"agg": n})}) == {}, n
        every = sorted(s.index for s in c.steps.values() if s.role == "svc-every")
        assert len(every) == n, (n, every)


def test_a_service_instance_keeps_its_index_on_a_node_that_stays():
    """Found in review: below the file's count the index was the node's position among the nodes
    still held, so prefill 2 -> 1 renamed every decode node's instance (and the running one stayed
    on the node it was launched on)."""
    text = DISAGG + "services:\n  - {name: side, type: generic, command: [side], placement: {node: workers}}\n"
    file = dict((o, i) for i, o in instance_ordinals(topology(recipe(text)).layout,
                                                      next(s for s in topology(recipe(text)).services
                                                           if s.name == "side")))
    for counts in ({"prefill": 1}, {"decode": 1}, {"prefill": 3, "decode": 5}, {"prefill": 1, "decode": 3}):
        top = topology(recipe(text), counts=counts)
        side = next(s for s in top.services if s.name == "side")
        got = instance_ordinals(top.layout, side)
        assert all(file[o] == i for i, o in got if o in file), (counts, got)
        assert {o for _, o in got} == {o for ep in top.endpoints for o in ep.nodes}, counts


def test_changing_an_earlier_roles_max_re_places_the_later_roles_extra_workers():
    """Found in review: after prefill's max 3 -> 4, prefill_3 was put in decode_2's old two-node job
    (it covered its new ordinal), so decode_2's new span overlapped a kept job and waited for good."""
    text = DISAGG.replace("name: d", "name: r")
    r, c = recipe(text), FakeCluster()
    assert settle(c, r, {"r": Scale({"prefill": 3, "decode": 4})}) == {}
    r2 = recipe(text.replace("prefill: {min: 1, max: 3", "prefill: {min: 1, max: 4"))
    assert settle(c, r2, {"r": Scale({"prefill": 4, "decode": 4})}) == {}
    spans = sorted((a.start, a.count) for a in c.allocs.values())
    assert spans == [(0, 7), (X, 1), (X + 1, 1), (X + 2, 2), (X + 4, 2)], spans


def test_a_queued_successor_sized_from_the_file_is_not_cancelled_when_the_count_dips():
    """Found in review: the count going 3 -> 2 -> 3 under the worker its job is too small for
    cancelled the queued successor and submitted it again at every step. (A job labelled before
    desired/baseline.py: a labelled one keeps decode_2 off node 0, on a job of its own.)"""
    c = FakeCluster(packed_labels=False)
    converge(c, recipe(PACKED), None)
    r = recipe(PACKED.replace("decode: {workers: 2, gpus: 2}", "decode: {workers: 3, gpus: 2}"))
    c.pending = True
    seen = []
    for n in (3, 2, 3, 2, 3):
        d = build({"r": r}, c.observed(), c.ports, Path("/state"), "py", 1, scale={"r": Scale({"decode": n})})
        p = plan(d, c.observed(d), 0.0)
        seen += [type(a).__name__ for a in p.actions if isinstance(a, SubmitAlloc | CancelAlloc)]
        c.apply(p)
    assert seen == ["SubmitAlloc"], seen


@pytest.mark.parametrize("counts,old,new", [
    ({"prefill": 3, "decode": 2}, "decode: {workers: 2, gpus: 8, nodes: 4}", "decode: {workers: 1, gpus: 8, nodes: 2}"),
    ({"prefill": 3, "decode": 3}, "prefill: {workers: 2, gpus: 4, nodes: 2}", "prefill: {workers: 1, gpus: 4, nodes: 1}"),
    ({"prefill": 3, "decode": 3}, "prefill: {workers: 2, gpus: 4, nodes: 2}", "prefill: {workers: 3, gpus: 4, nodes: 3}"),
], ids=["decode file 2 -> 1", "prefill file 2 -> 1", "prefill file 2 -> 3"])
def test_a_file_edit_that_moves_the_extra_workers_strands_none(counts, old, new):
    """Found in a second review: after a file edit changed the file's node count, an extra worker's
    new span fell on the job the file's workers keep, and the exact-span rule left it waiting for
    good. An extra worker now shares such a job (the GPU guard still applies to it)."""
    text = DISAGG.replace("name: d", "name: r")
    c, sc = FakeCluster(), {"r": Scale(counts)}
    assert settle(c, recipe(text), sc) == {}
    assert settle(c, recipe(text.replace(old, new)), sc) == {}



HEAD_SERVICE = EVERY.replace("agg: {workers: 3, gpus: 8}", "agg: {workers: 1, gpus: 1}").replace(
    "placement: {node: all}}", "placement: {node: head}}")


def test_at_zero_a_head_service_waits_for_no_allocation():
    """At zero no node is held, the head neither: its services (etcd, NATS, ...) are not listed as
    waiting for an allocation nobody asks for (the recipe said Progressing, not ScaledToZero), and
    they come back with the first worker."""
    r, c = recipe(HEAD_SERVICE), FakeCluster()
    assert settle(c, r) == {}
    assert settle(c, r, {"r": Scale({"agg": 0})}) == {}
    assert not c.steps and not c.allocs
    assert settle(c, r, {"r": Scale({"agg": 1})}) == {}
    assert sorted(s.role for s in c.steps.values()) == ["agg", "frontend", "svc-every"]
