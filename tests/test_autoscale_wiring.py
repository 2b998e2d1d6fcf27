"""The autoscaler's wiring, without processes: counts down the one pipeline, draining workers out of
the routers, the metrics table read from the mocker's own page, the memory file read back."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from fakes import FakeCluster, recipe
from reconciler.core.plan import CancelStep, LaunchStep
from reconciler.desired.build import build
from reconciler.desired.scale import Scale
from reconciler.desired.topology import generation
from reconciler.drivers.state import StateDir
from reconciler.mocker.metrics import EngineMetrics
from reconciler.shell.elastic import engine_metrics as em
from reconciler.shell.readiness import router_sync
from reconciler.shell.elastic.autoscale import Autoscaler
from reconciler.shell.record import write_endpoints
from reconciler.world import Observed
from support.autoscale import converge

TEXT = """\
name: r
model: {path: /m}
resources: {gpus_per_node: 8}
engine: mocker
frontend: {type: builtin}
roles:
  prefill: {workers: 1, gpus: 1}
  decode: {workers: 1, gpus: 2}
reconcile:
  autoscale:
    roles:
      decode: {min: 1, max: 4, target: {waiting_per_worker: 2}}
"""


def desired(c: FakeCluster, r, scale=None):
    return build({"r": r}, c.observed(), c.ports, Path("/state"), "py", 1, scale=scale).recipes["r"]


def test_counts_go_down_the_one_pipeline_and_keep_the_generation():
    r = recipe(TEXT)
    c = FakeCluster()
    d1 = converge(c, r, None)
    assert sorted(u.name for u in d1.units) == ["decode_0", "prefill_0"]
    before = {s.step_id for s in c.steps.values()}
    d3 = converge(c, r, {"r": Scale({"decode": 3})})
    assert sorted(u.name for u in d3.units) == ["decode_0", "decode_1", "decode_2", "prefill_0"]
    assert before <= {s.step_id for s in c.steps.values()}, "scaling up moves nothing that runs"
    assert d3.generation == d1.generation == generation(r), "the file's generation, whatever the count"
    assert all(u.spec_hash == v.spec_hash for u in d1.units for v in d3.units if u.name == v.name)
    # each new decode worker keeps the file's 2 GPUs
    assert {len(u.gpus) for u in d3.units if u.role == "decode"} == {2}


def test_scale_down_only_after_the_drain_and_the_highest_index_goes():
    r = recipe(TEXT)
    c = FakeCluster()
    converge(c, r, {"r": Scale({"decode": 3})})
    from reconciler.core.plan import plan

    # draining: the victim is still built and runs, nothing is cancelled, it leaves the routers
    sc = {"r": Scale({"decode": 3}, frozenset({"decode_2"}))}
    full = build({"r": r}, c.observed(), c.ports, Path("/state"), "py", 1, scale=sc)
    d = full.recipes["r"]
    p = plan(full, c.observed(full), 0.0)
    assert not [a for a in p.actions if isinstance(a, CancelStep | LaunchStep)]
    o = c.observed(full)
    victim = next(u for u in d.units if u.name == "decode_2")
    assert o.ready.get(victim.key) and not router_sync.serving(d, o, victim)
    assert victim.url not in router_sync.wanted(d, o)
    # then the count drops: exactly the victim's step is cancelled
    sc = {"r": Scale({"decode": 2})}
    full = build({"r": r}, c.observed(), c.ports, Path("/state"), "py", 1, scale=sc)
    p = plan(full, c.observed(full), 0.0)
    assert [a.unit for a in p.actions if isinstance(a, CancelStep)] == ["decode_2"]
    assert not [a for a in p.actions if isinstance(a, LaunchStep)]


def test_the_endpoints_file_leaves_the_victim_out(tmp_path):
    r = recipe(TEXT)
    c = FakeCluster()
    converge(c, r, {"r": Scale({"decode": 2})})
    sc = {"r": Scale({"decode": 2}, frozenset({"decode_1"}))}
    full = build({"r": r}, c.observed(), c.ports, tmp_path, "py", 1, scale=sc)
    d = full.recipes["r"]
    state = StateDir(tmp_path)
    write_endpoints(state, d, c.observed(full), 0.0)
    names = [w["name"] for w in json.loads((tmp_path / "r" / "endpoints.json").read_text())["workers"]]
    assert sorted(names) == ["decode_0", "prefill_0"]
    write_endpoints(state, dataclasses.replace(d, draining=frozenset()), c.observed(full), 0.0)
    names = [w["name"] for w in json.loads((tmp_path / "r" / "endpoints.json").read_text())["workers"]]
    assert sorted(names) == ["decode_0", "decode_1", "prefill_0"]


def test_the_mockers_page_is_read_with_vllms_names():
    m = EngineMetrics("m")
    m.step(running=3, waiting=5, kv=0.25)
    for _ in range(9):
        m.first_token(0.03)
    m.first_token(4.0)
    m.finished(0.5, 10, "stop")
    r = em.parse(m.render().decode())
    assert r.gauges == {"running": 3.0, "waiting": 5.0, "kv_usage": 0.25}
    assert r.requests == 1.0
    p90 = em.p90_ms([(r, None)], "ttft")
    assert p90 is not None and 20 <= p90 <= 40  # 9 of 10 in the (0.02, 0.04] bucket
    # the interval's buckets: the 10 old observations do not count again
    m.first_token(7.0)
    later = em.parse(m.render().decode())
    assert em.p90_ms([(later, r)], "ttft") > 5000


def test_other_stacks_names_are_read():
    text = ("# TYPE sglang:num_queue_reqs gauge\nsglang:num_queue_reqs{model_name=\"m\"} 7\n"
            "# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs{model_name=\"m\"} 2\n"
            "# TYPE dynamo_frontend_requests_total counter\ndynamo_frontend_requests_total{model=\"m\"} 4\n")
    r = em.parse(text)
    assert r.gauges == {"waiting": 7.0, "running": 2.0} and r.requests == 4.0


def test_memory_file_gives_the_counts_and_a_bad_one_the_files(tmp_path):
    r = recipe(TEXT)
    state = StateDir(tmp_path)
    a = Autoscaler(state)
    assert a.overrides({"r": r}, 0.0)["r"] == Scale({"decode": 1})  # nothing kept: the file's workers
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "autoscale.json").write_text(json.dumps(
        {"roles": {"decode": {"built": 3, "target": 2, "drain_since": 5.0}}}))
    assert a.overrides({"r": r}, 9.0)["r"] == Scale({"decode": 3}, frozenset({"decode_2"}))
    (tmp_path / "r" / "autoscale.json").write_text(json.dumps({"roles": {"decode": {"built": "x"}}}))
    assert a.overrides({"r": r}, 9.0)["r"] == Scale({"decode": 1})
    (tmp_path / "r" / "autoscale.json").write_text(json.dumps({"roles": {"decode": {"built": 50, "target": 50}}}))
    assert a.overrides({"r": r}, 9.0)["r"] == Scale({"decode": 4}), "clamped to the spec's max"


BIG = """\
name: r
model: {path: /m}
resources: {gpus_per_node: 8}
engine: mocker
frontend: {type: none}
roles:
  agg: {workers: 1, gpus: 8}
reconcile:
  nodes_per_allocation: 1
  autoscale:
    roles:
      agg: {min: 1, max: 4, target: {waiting_per_worker: 2}}
"""


def test_pending_capacity_is_asked_for_once_and_released_when_the_count_drops():
    from reconciler.core.plan import CancelAlloc, SubmitAlloc, plan

    r = recipe(BIG)
    c = FakeCluster()
    converge(c, r, None)
    c.pending = True  # Slurm queues what comes next
    sc = {"r": Scale({"agg": 2})}

    def step():
        full = build({"r": r}, Observed(tuple(c.allocs.values()), tuple(c.steps.values())), c.ports, Path("/state"),
                     "py", 1, scale=sc)
        p = plan(full, c.observed(full), 0.0)
        c.apply(p)
        return full.recipes["r"], p

    d, p = step()
    assert [a.spec.index for a in p.actions if isinstance(a, SubmitAlloc)] == [1]
    for _ in range(3):  # the same count again: the pending allocation counts as coming, never a second
        d, p = step()
        assert not [a for a in p.actions if isinstance(a, SubmitAlloc)]
    assert d.waiting == (("agg", 1),)
    pending = [j for j, a in c.allocs.items() if a.state == "PENDING"]
    sc = {"r": Scale({"agg": 1})}  # the load is gone before Slurm ran it
    d, p = step()
    assert [a.job_id for a in p.actions if isinstance(a, CancelAlloc)] == pending
    # what describe reports for it: Slurm's reason and expected start of the pending allocation
    from reconciler.core.plan.pending import PendingInfo
    from reconciler.shell.elastic.autoscale import coming

    c.pending = True
    sc = {"r": Scale({"agg": 2})}
    d, _ = step()
    job = next(j for j, a in c.allocs.items() if a.state == "PENDING")
    o = dataclasses.replace(c.observed(), pending={job: PendingInfo(job, 1, "Priority", 1000.0 + 14 * 60, 1000.0)})
    (line,) = coming(d, o, "agg", 1000.0)
    assert line.startswith("agg_1 wait for allocation 1 (job") and "Priority" in line and "in 14m" in line, line


def test_a_recipe_not_decided_on_leaves_no_wake_up_due(tmp_path):
    """A suspended (or held) autoscaled recipe must not keep a past due time: the loop would wake
    every 50 ms for it."""
    from reconciler.shell.manifests import Manifests
    from reconciler.shell.snapshot import Snapshot

    r = recipe(TEXT)
    c = FakeCluster()
    d = converge(c, r, None)
    a = Autoscaler(StateDir(tmp_path))
    a._due["r"] = 5.0  # decided on before
    full = build({"r": r}, c.observed(), c.ports, tmp_path, "py", 1)
    full = dataclasses.replace(full, recipes={"r": dataclasses.replace(d, suspended=True)})
    snap = Snapshot(Manifests(recipes={"r": r}), full, c.observed(), None, c.ports, (), (), 100.0)
    assert a.after_tick(snap) is False
    assert a.next_due() is None
