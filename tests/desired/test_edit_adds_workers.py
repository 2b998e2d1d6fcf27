"""A file edit that adds workers moves none that runs (desired/baseline.py, issue 44): the live
allocations' labels say what they were packed for; the workers beyond it get allocations of their
own (desired/elastic.py), a count back down releases them first, and nothing lives -> srtctl's
packed layout. Expectation tables on hand-built allocations and steps, then whole plans against
the in-memory cluster."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from fakes import FakeCluster, recipe
from reconciler.core.plan import CancelAlloc, CancelStep, LaunchStep, SubmitAlloc, plan
from reconciler.core.ports import NodePortAllocator
from reconciler.desired.baseline import running_packing
from reconciler.desired.build import build
from reconciler.desired.elastic import EXTRA_BASE, GROWN_BASE, GROWN_STRIDE
from reconciler.desired.placement import placement
from reconciler.desired.topology import topology
from reconciler.world import Alloc, Observed

AGG = """\
name: r
model: {path: /m}
resources: {gpus_per_node: 8}
engine: {type: mocker, speedup_ratio: %(speed)d}
frontend: {type: builtin}
roles:
  agg: {workers: %(workers)d, gpus: %(gpus)d}
"""

# prefill and decode on whole nodes of their own: srtctl's layout puts decode after prefill
DISAGG = """\
name: r
model: {path: /m}
resources: {gpus_per_node: 8}
engine: {type: mocker}
frontend: {type: builtin}
roles:
  prefill: {workers: %(prefill)d, gpus: 8}
  decode: {workers: %(decode)d, gpus: 8}
"""

G_AGG = GROWN_BASE + 2 * GROWN_STRIDE  # agg's additions (prefill 0, decode 1, agg 2)
G_PRE = GROWN_BASE


def agg(workers: int, gpus: int = 1, speed: int = 100):
    return recipe(AGG % {"workers": workers, "gpus": gpus, "speed": speed})


def job(jid: str, start: int, count: int, gpus: int, packed: dict | None, index: int = 0) -> Alloc:
    return Alloc(jid, "r", index, start, count, "RUNNING", "None", tuple(f"n{jid}-{i}" for i in range(count)),
                 gpus=gpus, packed=tuple(sorted(packed.items())) if packed is not None else None)


def shape(r, live: list[Alloc]) -> dict:
    """Where each worker goes, which allocations the recipe needs and keeps, and what waits for a
    bigger job: what the desired state says for this file and these live allocations."""
    top = topology(r, packed=running_packing(live))
    where = placement(top, live, [])
    return {
        "workers": {ep.name: (ep.nodes, ep.gpus) for ep in top.endpoints},
        "allocs": [(s.index, s.start, s.count, s.gpus_per_node, dict(s.packed)) for s in where.allocs],
        "keep": list(where.keep),
        "resize": dict(where.resize),
    }


CASES = [
    ("fresh deploy: srtctl's packing, both on node 0", agg(2), [],
     {"workers": {"agg_0": ((0,), (0,)), "agg_1": ((0,), (1,))}, "allocs": [(0, 0, 1, 2, {"agg": 2})],
      "keep": [], "resize": {}}),
    ("1 -> 2: agg_0 stays on its job, agg_1 gets a job of its own", agg(2), [job("7", 0, 1, 1, {"agg": 1})],
     {"workers": {"agg_0": ((0,), (0,)), "agg_1": ((G_AGG,), (0,))},
      "allocs": [(0, 0, 1, 1, {"agg": 1}), (1, G_AGG, 1, 1, {"agg": 1})], "keep": ["7"], "resize": {}}),
    ("1 -> 3: each addition its own job", agg(3), [job("7", 0, 1, 1, {"agg": 1})],
     {"workers": {"agg_0": ((0,), (0,)), "agg_1": ((G_AGG,), (0,)), "agg_2": ((G_AGG + 1,), (0,))},
      "allocs": [(0, 0, 1, 1, {"agg": 1}), (1, G_AGG, 1, 1, {"agg": 1}), (2, G_AGG + 1, 1, 1, {"agg": 1})],
      "keep": ["7"], "resize": {}}),
    ("2 -> 1 after 1 -> 2: the addition's job goes, agg_0's stays", agg(1),
     [job("7", 0, 1, 1, {"agg": 1}), job("8", G_AGG, 1, 1, {"agg": 1}, index=1)],
     {"workers": {"agg_0": ((0,), (0,))}, "allocs": [(0, 0, 1, 1, {"agg": 1})], "keep": ["7"], "resize": {}}),
    ("2 -> 1 from a packed 2: below the baseline the job is kept as it was packed", agg(1),
     [job("7", 0, 1, 2, {"agg": 2})],
     {"workers": {"agg_0": ((0,), (0,))}, "allocs": [(0, 0, 1, 2, {"agg": 2})], "keep": ["7"], "resize": {}}),
    ("and back to 2: agg_1 on the GPU its job still holds", agg(2), [job("7", 0, 1, 2, {"agg": 2})],
     {"workers": {"agg_0": ((0,), (0,)), "agg_1": ((0,), (1,))}, "allocs": [(0, 0, 1, 2, {"agg": 2})],
      "keep": ["7"], "resize": {}}),
    ("a job labelled before baselines: the file's packing, a successor sized for it (as before)", agg(2),
     [job("7", 0, 1, 1, None)],
     {"workers": {"agg_0": ((0,), (0,)), "agg_1": ((0,), (1,))}, "allocs": [(0, 0, 1, 2, {"agg": 2})],
      "keep": ["7"], "resize": {0: "agg_1 uses GPU 1, job 7 holds 1 per node"}}),
    ("whole-node TP workers 1 -> 2: a one-node job for the addition", agg(2, gpus=8),
     [job("7", 0, 1, 8, {"agg": 1})],
     {"workers": {"agg_0": ((0,), tuple(range(8))), "agg_1": ((G_AGG,), tuple(range(8)))},
      "allocs": [(0, 0, 1, 8, {"agg": 1}), (1, G_AGG, 1, 8, {"agg": 1})], "keep": ["7"], "resize": {}}),
    ("two-node workers 1 -> 2: a two-node job for the addition", agg(2, gpus=16),
     [job("7", 0, 2, 8, {"agg": 1})],
     {"workers": {"agg_0": ((0, 1), tuple(range(8))), "agg_1": ((G_AGG, G_AGG + 1), tuple(range(8)))},
      "allocs": [(0, 0, 2, 8, {"agg": 1}), (1, G_AGG, 2, 8, {"agg": 1})], "keep": ["7"], "resize": {}}),
    ("prefill 1 -> 2 in front of decode: decode_0 keeps its node (the file would shift it)",
     recipe(DISAGG % {"prefill": 2, "decode": 1}), [job("7", 0, 2, 8, {"prefill": 1, "decode": 1})],
     {"workers": {"prefill_0": ((0,), tuple(range(8))), "prefill_1": ((G_PRE,), tuple(range(8))),
                  "decode_0": ((1,), tuple(range(8)))},
      "allocs": [(0, 0, 2, 8, {"decode": 1, "prefill": 1}), (1, G_PRE, 1, 8, {"decode": 1, "prefill": 1})],
      "keep": ["7"], "resize": {}}),
]


@pytest.mark.parametrize("why,r,live,want", CASES, ids=[c[0] for c in CASES])
def test_where_the_workers_go(why, r, live, want):
    assert shape(r, live) == want


def test_the_baseline_is_the_same_whatever_order_squeue_lists_the_jobs_in():
    """A restart reads the jobs again, maybe in another order: the lowest allocation index's label
    wins for each role, then the oldest job's."""
    jobs = [job("9", 0, 1, 1, {"agg": 1}), job("12", G_AGG, 1, 1, {"agg": 1, "prefill": 3}, index=1),
            job("10", 0, 1, 2, {"agg": 2}), Alloc("11", "r", 2, 5, 1, "COMPLETED", packed=(("agg", 5),))]
    seen = set()
    for seed in range(10):
        random.Random(seed).shuffle(jobs)
        seen.add(tuple(sorted(running_packing(jobs).items())))
    assert seen == {(("agg", 1), ("prefill", 3))}
    assert running_packing([job("7", 0, 1, 1, None)]) is None


def unit_hashes(d) -> dict[str, str]:
    return {u.name: u.spec_hash for u in d.recipes["r"].units}


def test_a_restart_decides_the_same():
    """The same Slurm (jobs and steps), read by a new reconciler with nothing cached and fresh
    ports: the same allocations, placements and worker specs — the baseline is in the labels."""
    c = FakeCluster()
    c.converge({"r": agg(1)})
    c.converge({"r": agg(2)})
    obs = Observed(tuple(c.allocs.values()), tuple(c.steps.values()))
    first = build({"r": agg(2)}, obs, c.ports, Path("/state"), "py", 1).recipes["r"]
    again = build({"r": agg(2)}, obs, NodePortAllocator(), Path("/state"), "py", 1).recipes["r"]
    assert again.allocs == first.allocs and again.keep_allocs == first.keep_allocs
    assert again.job_of == first.job_of
    assert {u.name: (u.ordinals, u.nodes, u.gpus) for u in again.units} == \
        {u.name: (u.ordinals, u.nodes, u.gpus) for u in first.units}
    d = build({"r": agg(2)}, obs, c.ports, Path("/state"), "py", 1)
    assert not plan(d, c.observed(d), 0.0).actions


def test_one_to_two_keeps_the_running_worker_and_adds_a_job():
    """The edit's plan: one job submitted for agg_1 alone; agg_0's step is never cancelled, its spec
    unchanged; then agg_1 launches there. Back to 1: agg_1 and its job go, nothing else."""
    c = FakeCluster()
    c.converge({"r": agg(1)})
    (job0,) = c.allocs
    (step0,) = [sid for sid, s in c.steps.items() if s.role == "agg"]
    spec0 = c.steps[step0].spec_hash
    p = c.plan({"r": agg(2)})
    (sub,) = [a for a in p.actions if isinstance(a, SubmitAlloc)]
    assert (sub.spec.start, sub.spec.count, sub.spec.gpus_per_node) == (G_AGG, 1, 1)
    assert sub.describe().endswith("(needed for agg_1)"), sub.describe()  # not its logical ordinal
    assert not [a for a in p.actions if isinstance(a, CancelStep | CancelAlloc)]
    c.apply(p)
    p = c.plan({"r": agg(2)})
    assert [a.describe().split()[1] for a in p.actions if isinstance(a, LaunchStep)] == ["r/agg_1"]
    c.converge({"r": agg(2)})
    assert c.steps[step0].spec_hash == spec0, "agg_0 runs on, the same spec"
    assert sorted(s.role + str(s.index) for s in c.steps.values() if s.role == "agg") == ["agg0", "agg1"]
    extra = next(j for j, a in c.allocs.items() if j != job0)
    p = c.plan({"r": agg(1)})
    assert [a.job_id for a in p.actions if isinstance(a, CancelAlloc)] == [extra]
    assert [a.unit for a in p.actions if isinstance(a, CancelStep)] == ["agg_1"]
    c.converge({"r": agg(1)})
    assert list(c.allocs) == [job0] and step0 in c.steps


def test_a_flag_change_with_the_growth_rolls_in_place_and_adds_a_job():
    """speedup 100 -> 50 and 1 -> 2 at once: agg_0 is replaced (surge) on its own job, agg_1 gets a
    job of its own: no successor for job 0, which keeps its one GPU."""
    c = FakeCluster()
    c.converge({"r": agg(1)})
    (job0,) = c.allocs
    (old,) = [s.spec_hash for s in c.steps.values() if s.role == "agg"]
    c.converge({"r": agg(2, speed=50)})
    assert c.allocs[job0].gpus == 1 and len(c.allocs) == 2
    on0 = [s for s in c.steps.values() if s.role == "agg" and s.index == 0]
    assert len(on0) == 1 and on0[0].job_id == job0 and on0[0].spec_hash != old


def test_growing_twice_never_moves_an_addition():
    """1 -> 2 -> 3: agg_1's job and step stay through the second edit (additions are placed by
    index from a fixed ordinal, whatever the count)."""
    c = FakeCluster()
    c.converge({"r": agg(1)})
    c.converge({"r": agg(2)})
    before = dict(c.steps)
    c.converge({"r": agg(3)})
    assert set(before) <= set(c.steps)
    assert sorted(a.start for a in c.allocs.values()) == [0, G_AGG, G_AGG + 1]
    assert G_AGG > EXTRA_BASE


def test_the_label_carries_the_baseline_through_slurm():
    """sbatch's --comment and squeue's read-back: the baseline survives a restart in Slurm itself."""
    from reconciler import labels
    from reconciler.drivers.slurm import sbatch_argv

    c = labels.job_comment("o", "r", 1, G_AGG, 1, 1, (("decode", 2), ("prefill", 1)))
    assert c.endswith(" gpus=1 packed=decode:2,prefill:1")
    lab = labels.parse_job(labels.job_name("o", "r", 1), c, "o")
    assert (lab.start, lab.gpus, lab.packed) == (G_AGG, 1, (("decode", 2), ("prefill", 1)))
    old = labels.parse_job(labels.job_name("o", "r", 0), labels.job_comment("o", "r", 0, 0, 1, 2), "o")
    assert (old.gpus, old.packed) == (2, None)
    spec = placement(topology(agg(2)), [], []).allocs[0]
    assert any(a.endswith(" packed=agg:2") for a in sbatch_argv(spec, "o", Path("/log")) if a.startswith("--comment="))


def test_a_submission_names_its_workers_not_their_ordinals():
    """Logical node ordinals are internal (an added worker's are past GROWN_BASE): events name the
    workers an allocation is submitted for, the first three and how many more."""
    from reconciler.world import AllocSpec
    many = AllocSpec("r", 0, 0, 2, 8, workers=tuple(f"agg_{i}" for i in range(5)))
    assert SubmitAlloc(many).describe() == ("submit allocation r/a0: 2 node(s) x 8 GPU(s) "
                                            "(needed for agg_0, agg_1, agg_2 and 2 more)")
    assert SubmitAlloc(AllocSpec("r", 1, 4, 1, 8)).describe().endswith("(needed for nodes 4-4)")
    assert many == AllocSpec("r", 0, 0, 2, 8)  # what it is for is said, not compared
