"""Shadow-engine recovery (engine.failover): rules, layout, argv and environment, rendered.

The real engines need GPUs; tests/test_failover_stack.py runs the layout on the real Slurm
with stand-ins. Here: srtctl's validation rules as located errors, the corpus example's
render, the engines' flags and environment, the per-worker gms instance, names and labels.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler import labels
from reconciler.desired.build import build_recipe
from reconciler.errors import RecipeError
from reconciler.core.ports import NodePortAllocator
from reconciler.desired.admission import load_text
from reconciler.desired.render import render_units
from reconciler.world import Alloc

from conftest import CORPUS  # noqa: E402 - ../shared/corpus beside the checkout, or $RECONCILER_CORPUS
from support.recipes import failover_recipe as load, failover_text as text
EXAMPLE = CORPUS / "srt-slurm-v2" / "features" / "vllm-failover.yaml"



REFUSED = [
    (dict(frontend="builtin"), "frontend.type", "needs frontend.type: dynamo"),
    (dict(extra="dynamo: {sidecar: true}\n"), "dynamo.sidecar", "sidecar"),
    (dict(role=", sidecar: true"), "roles.agg.sidecar", "sidecar"),
    (dict(gpus=2, role=", args: {data-parallel-size: 2}"), "roles.agg.args.data-parallel-size", "data parallel"),
    (dict(role=", args: {load-format: safetensors}"), "roles.agg.args.load-format", "gms or unset"),
    (dict(failover="{shadow_engines: 0}"), "engine.failover.shadow_engines", "greater than or equal to 1"),
    (dict(failover="{shared_dir: shm}"), "engine.failover.shared_dir", "absolute directory"),
    (dict(failover="{restart: sometimes}"), "engine.failover.restart", "expected always, never"),
    (dict(failover="{shared_dir: /" + "d" * 30 + "}"), "engine.failover.shared_dir", "over the 107"),
    (dict(extra="services: [{name: gms, type: gms, placement: {per: node}}]\n"), "services.0.placement.per",
     "placement.per must be worker"),
    (dict(extra="services: [{name: g, type: generic, command: [x], placement: {node: head, per: worker}}]\n"),
     "services.0.placement.node", "placed on workers"),
    (dict(extra="services: [{name: g, type: generic, command: [x], placement: {per: worker}, "
                "readiness: {port: 9000}}]\n"), "services.0.readiness", "must be a log probe"),
]


@pytest.mark.parametrize("kw, key, words", REFUSED, ids=[r[1] for r in REFUSED])
def test_the_rules_are_located_errors(kw, key, words):
    with pytest.raises(RecipeError) as e:
        load(**kw)
    assert e.value.key == key and words in e.value.message, (e.value.key, e.value.message)
    assert e.value.line is not None


def test_a_declared_gms_is_per_worker_by_default():
    r = load(extra="services: [{name: gms, type: gms, placement: {node: workers}, command: [my-gms], "
                   "readiness: {timeout_seconds: 30}}]\n")
    units = by_name(render_units(r, None, Path("/s")))
    g = units["svc-gms-agg_1"].launches[0].argv
    assert g[5:] == ("1", "30", "my-gms") and units["svc-gms-agg_1"].startup_timeout == 60


def test_a_gms_service_without_failover_is_refused():
    t = text().replace("failover: {}", "connector: nixl") + "services: [{name: gms, type: gms}]\n"
    with pytest.raises(RecipeError) as e:
        load_text(t, "fo.yaml", preflight=False)
    assert e.value.key == "services.0.type" and "needs engine.failover" in e.value.message


def test_failover_is_refused_by_engines_without_it():
    with pytest.raises(RecipeError) as e:
        load_text(text().replace("type: vllm", "type: sglang"), "fo.yaml", preflight=False)
    assert "failover" in str(e.value)


def by_name(units) -> dict:
    return {u.name: u for u in units}


def test_the_corpus_example_renders_engines_gms_and_shared_directory(tmp_path):
    if not EXAMPLE.exists():
        pytest.fail(f"corpus example missing: {EXAMPLE} (set RECONCILER_CORPUS)")
    r = load_text(EXAMPLE.read_text(), str(EXAMPLE), preflight=False).recipe
    units = by_name(render_units(r, None, tmp_path))
    assert list(units) == ["svc-etcd_0", "svc-gms-agg_0", "svc-gms-agg_1", "agg_0", "agg-e1_0", "agg_1",
                           "agg-e1_1", "frontend_0"]
    root = "/dev/shm/rcl-<job>"
    for i in (0, 1):
        gms, engines = units[f"svc-gms-agg_{i}"], (units[f"agg_{i}"], units[f"agg-e1_{i}"])
        (g,) = gms.launches
        genv = dict(g.env)
        assert genv["CUDA_VISIBLE_DEVICES"] == str(i) and genv["GMS_SOCKET_DIR"] == f"{root}/agg_{i}"
        assert g.argv[:2] == ("/bin/bash", "-c") and g.argv[4:] == (
            f"{root}/agg_{i}", "1", "120", "python3", "-m", "gpu_memory_service")
        assert gms.probe == "log" and gms.probe_arg == "GMS\\ ready:" and gms.phase == "before_workers"
        assert gms.critical and gms.startup_timeout == 150
        for k, e in enumerate(engines):
            (l,) = e.launches
            env = dict(l.env)
            assert env["ENGINE_ID"] == str(k) and env["CUDA_VISIBLE_DEVICES"] == str(i)
            assert env["FAILOVER_LOCK_PATH"] == f"{root}/agg_{i}/failover.lock"
            assert env["GMS_SOCKET_DIR"] == f"{root}/agg_{i}"
            assert env["DYN_VLLM_GMS_SHADOW_MODE"] == "true"
            assert env["DYN_SYSTEM_STARTING_HEALTH_STATUS"] == "notready"
            argv = list(l.argv)
            assert argv[argv.index("--load-format"):argv.index("--load-format") + 3] == [
                "--load-format", "gms", "--gms-shadow-mode"]
            assert "--device-ids" not in argv
            assert e.needs == (("svc-gms-agg", i),)
    ports = [frozenset(units[u].ports.values()) for u in ("agg_0", "agg-e1_0", "agg_1", "agg-e1_1")]
    assert len(frozenset().union(*ports)) == sum(len(p) for p in ports), "every engine has its own ports"


def test_engine_argv_exactly():
    r = load(role=", args: {load-format: gms, max-model-len: 4096}")
    u = by_name(render_units(r, None, Path("/s")))["agg-e1_1"]
    (l,) = u.launches
    p = u.ports
    assert list(l.argv) == [
        "python3", "-m", "dynamo.vllm", "--model", "/m", "--served-model-name", "m",
        "--kv-transfer-config", '{"kv_connector": "NixlConnector", "kv_role": "kv_both"}',
        "--load-format", "gms", "--gms-shadow-mode", "--request-plane", "tcp",
        "--dump-config-to", "/s/fo/configs/node1_agg_w1_e1_r0_config.json", "--max-model-len", "4096"]
    assert dict(l.env)["DYN_SYSTEM_PORT"] == str(p["system"]) and dict(l.env)["ENGINE_ID"] == "1"


def test_multi_node_engines_each_get_their_own_master_port():
    units = by_name(render_units(load(gpus=16, failover="{shadow_engines: 2}"), None, Path("/s")))
    ports = [next(l.argv[l.argv.index("--master-port") + 1] for l in units[u].launches if "--master-port" in l.argv)
             for u in ("agg_0", "agg-e1_0", "agg-e2_0")]
    assert ports == ["29500", "29600", "29700"]
    units = by_name(render_units(load(gpus=16, role=", args: {master-port: 30000}"), None, Path("/s")))
    assert {l.argv[l.argv.index("--master-port") + 1] for l in units["agg-e1_1"].launches} == {"30100"}
    assert all(l.argv.count("--master-port") == 1 for l in units["agg-e1_1"].launches)
    gms = units["svc-gms-agg_0"]
    assert [l.rank for l in gms.launches] == [0, 1] and gms.launches[0].argv[5] == "8"  # one server per GPU


def test_the_desired_state_keeps_a_worker_s_engines_and_gms_together(tmp_path):
    r = load()
    alloc = Alloc("77", "fo", 0, 0, 1, "RUNNING", nodes=("vm",))
    d = build_recipe(r, [alloc], NodePortAllocator(), tmp_path, "python3")
    assert {u.name for u in d.units} == {"agg_0", "agg-e1_0", "agg_1", "agg-e1_1"}
    assert {u.name for u in d.services} == {"svc-etcd_0", "svc-gms-agg_0", "svc-gms-agg_1"}
    assert all(d.job_of[k] == "77" for k in [("agg-e1", 0), ("svc-gms-agg", 1), ("agg", 1)])
    assert dict(by_name(d.units)["agg-e1_0"].launches[0].env)["FAILOVER_LOCK_PATH"] == "/dev/shm/rcl-77/agg_0/failover.lock"
    assert "svc-gms-agg" not in str(d.gates), "a per-worker instance gates its own worker, not a phase"
    assert d.policy("agg-e1") == d.policy("agg") and d.policy("svc-gms-agg").backoff_seconds == 1.0
    pending = build_recipe(r, [Alloc("78", "fo", 0, 0, 1, "PENDING")], NodePortAllocator(), tmp_path, "python3")
    assert set(pending.waiting) >= {("agg", 0), ("agg-e1", 0), ("svc-gms-agg", 0), ("agg-e1", 1), ("svc-gms-agg", 1)}


def test_the_example_s_restart_keys_set_the_engines_policy(tmp_path):
    r = load(failover="{restart: never, restart_backoff_seconds: 3}")
    d = build_recipe(r, [], NodePortAllocator(), tmp_path, "python3")
    assert d.policy("agg").policy == "never" == d.policy("agg-e1").policy
    assert d.policy("agg-e1").backoff_seconds == 3


def test_a_generic_per_worker_service_gets_the_worker_s_view():
    t = text(gpus=2, extra="services:\n  - {name: mon, type: generic, start: before_workers, command: [mon, -i, "
                           "'{worker_gpus}', '{worker_role}-{worker_index}-{worker_gpu_count}@{node}'], "
                           "placement: {node: agg, per: worker}, readiness: {log: {pattern: up}}}\n")
    units = by_name(render_units(load_text(t, "fo.yaml", preflight=False).recipe, None, Path("/s")))
    mon = units["svc-mon-agg_1"]
    assert list(mon.launches[0].argv) == ["mon", "-i", "2,3", "agg-1-2@node1"]
    assert dict(mon.launches[0].env)["CUDA_VISIBLE_DEVICES"] == "2,3" and mon.probe == "log"
    assert units["agg-e1_1"].needs == (("svc-gms-agg", 1), ("svc-mon-agg", 1))
    t = t.replace("start: before_workers", "start: with_workers")
    units = by_name(render_units(load_text(t, "fo.yaml", preflight=False).recipe, None, Path("/s")))
    assert units["agg-e1_1"].needs == (("svc-gms-agg", 1),) and units["svc-mon-agg_1"].needs == (("svc-gms-agg", 1),)
    assert units["svc-gms-agg_1"].needs == ()


def test_a_per_worker_service_s_env_preamble_and_marker_get_the_placeholders_too():
    t = text(gpus=2, extra="services:\n  - {name: mon, type: generic, command: [mon], env: {WHO: "
                           "'{worker_role}-{worker_index}@{node}'}, preamble: 'echo {worker_gpus}', "
                           "placement: {node: agg, per: worker}, readiness: {file: {path: 'ready-{worker_index}'}}}\n")
    mon = by_name(render_units(load_text(t, "fo.yaml", preflight=False).recipe, None, Path("/s")))["svc-mon-agg_1"]
    launch = mon.launches[0]
    assert dict(launch.env)["WHO"] == "agg-1@node1"
    assert launch.argv[2].startswith("echo 2,3\n") and launch.argv[-1] == "mon"
    assert mon.probe_arg.endswith("/ready-1")


def test_engine_roles_fit_the_step_label_scheme():
    assert labels.engine_role("agg", 0) == "agg" and labels.engine_role("decode", 2) == "decode-e2"
    assert labels.split_engine("decode-e2") == ("decode", 2) and labels.split_engine("agg") == ("agg", 0)
    assert labels.split_engine("svc-gms-agg") == ("svc-gms-agg", 0)
    name = labels.step_name("o1", "fo", "agg-e1", 3, 0, "abc123")
    assert name == "rcl:o1:fo:agg-e1:3:0:abc123"
    assert labels.parse_step(name, "o1") == labels.StepLabel("fo", "agg-e1", 3, 0, "abc123")
    # a step named before engines existed is adopted unchanged
    assert labels.parse_step("rcl:o1:fo:agg:3:0:abc123", "o1") == labels.StepLabel("fo", "agg", 3, 0, "abc123")


def test_a_spec_change_rolls_failover_engines_in_place_even_with_max_unavailable_zero():
    """Their engines share the worker's gms: never surged (no second life), rolled a unit at a time."""
    import sys
    from pathlib import Path as P

    sys.path.insert(0, str(P(__file__).parent))
    from fakes import FakeCluster

    from reconciler.core.plan import CancelStep, StopReason

    c = FakeCluster()
    c.converge({"fo": load()}, rounds=80)
    changed = {"fo": load(role=", args: {load-format: gms, max-model-len: 4096}")}
    d = c.desired(changed).recipes["fo"]
    assert d.max_surge == 0 and d.max_unavailable == 1 and not d.previous
    cancels = [a for a in c.plan(changed).actions if isinstance(a, CancelStep)]
    assert cancels and {a.reason for a in cancels} == {StopReason.SPEC_CHANGED}
    assert c.converge(changed, rounds=200) > 0
