"""The Mooncake KV store: the master service, the workers' wiring, srtctl's validation rules."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reconciler.errors import RecipeError
from reconciler.desired.admission import load_text
from reconciler.desired.render import render_units
from reconciler.desired.services import resolve

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "srt-slurm-v2"

MOCKER = """\
name: mc
model: {{path: /m}}
resources: {{gpus_per_node: 8}}
engine: {{type: mocker{kv}}}
frontend: {{type: builtin}}
roles: {{agg: {{workers: 2, gpus: 1{role}}}}}
{extra}"""

SGLANG_PD = """\
name: sg
model: {{path: /m}}
resources: {{gpus_per_node: 8}}
engine: {{type: sglang, mooncake_kv_store: {{env: {{MOONCAKE_PROTOCOL: tcp}}}}}}
frontend: {{type: sglang-router}}
roles:
  prefill: {{workers: 1, gpus: 1, args: {{{pre}}}}}
  decode: {{nodes: colocate, workers: 1, gpus: 1, args: {{{dec}}}}}
"""

VLLM_PD = """\
name: vl
model: {{path: /m}}
resources: {{gpus_per_node: 8}}
engine:
  type: vllm
  mooncake_kv_store:
    env: {{MC_STORE_CLIENT_METRIC: "1"}}
    store_config: {{protocol: tcp, global_segment_size: 4GB, master_server_address: "ignored:1"}}
frontend: {{type: dynamo}}
roles:
  prefill: {{workers: 1, gpus: 1, args: {{kv-transfer-config: '{kvt}'}}}}
  decode: {{nodes: colocate, workers: 1, gpus: 1}}
"""
MOONCAKE_KVT = '{"kv_connector":"MooncakeStoreConnector","kv_role":"kv_both"}'


def load(text: str):
    return load_text(text, "r.yaml", preflight=False).recipe


def units(text: str, nodes: list[str] | None = None) -> dict[str, object]:
    return {f"{u.role}_{u.index}": u for u in render_units(load(text), nodes, Path("/state"))}


def env_of(unit) -> dict[str, str]:
    return dict(unit.launches[0].env)


def test_engine_mooncake_kv_store_runs_the_master_before_the_workers_and_wires_every_worker():
    u = units(MOCKER.format(kv=", mooncake_kv_store: {env: {MOONCAKE_PROTOCOL: tcp}, master_extra_args: [--x=1], "
                              "default_kv_lease_ttl_ms: 20000}", role="", extra=""), ["n1"])
    master = u["svc-mooncake-master_0"]
    p = master.ports
    assert list(master.launches[0].argv) == [
        "mooncake_master", f"--port={p['rpc']}", "--enable_http_metadata_server=true",
        f"--http_metadata_server_port={p['metadata']}", "--eviction_high_watermark_ratio=0.9",
        "--default_kv_lease_ttl=20000", "--rpc_thread_num=16", "--enable_metric_reporting=true",
        f"--metrics_port={p['metrics']}", "--x=1"]
    assert (master.phase, master.critical, master.probe, master.health_port, master.health_path) == \
        ("before_workers", True, "http", p["metrics"], "/health")
    assert len({p["rpc"], p["metadata"], p["metrics"]}) == 3
    for w in ("agg_0", "agg_1"):
        env = env_of(u[w])
        assert env["MOONCAKE_MASTER"] == f"n1:{p['rpc']}"
        assert env["MOONCAKE_TE_META_DATA_SERVER"] == f"http://n1:{p['metadata']}/metadata"
        assert env["MOONCAKE_LOCAL_HOSTNAME"] == "n1" and env["MOONCAKE_PROTOCOL"] == "tcp"
        assert "MOONCAKE_CONFIG_PATH" not in env  # the mocker reads no store config
    assert "MOONCAKE_MASTER" not in env_of(u["frontend_0"])


def test_a_declared_service_is_the_same_master_and_a_role_env_pins_the_local_hostname():
    text = MOCKER.format(kv="", role=", env: {MOONCAKE_LOCAL_HOSTNAME: 10.1.2.3}",
                         extra="services:\n  - {name: kv-master, type: mooncake-master, args: [--y=2], container: mc.sqsh}\n")
    (spec,) = resolve(load(text))
    assert (spec.kind, spec.role, spec.phase, spec.args, spec.implied_by) == \
        ("mooncake-master", "svc-kv-master", "before_workers", ("--y=2",), "")
    u = units(text)
    assert u["svc-kv-master_0"].launches[0].argv[-1] == "--y=2" and u["svc-kv-master_0"].container == "mc.sqsh"
    assert env_of(u["agg_0"])["MOONCAKE_LOCAL_HOSTNAME"] == "10.1.2.3"
    assert env_of(u["agg_0"])["MOONCAKE_MASTER"].endswith(f":{u['svc-kv-master_0'].ports['rpc']}")


def test_the_master_runs_in_the_job_container_unless_it_names_its_own():
    text = (SGLANG_PD.format(pre="", dec="").split("roles:")[0].replace("{path: /m}", "{path: /m, container: job.sqsh}")
            .replace("mooncake_kv_store: {env: {MOONCAKE_PROTOCOL: tcp}}", "mooncake_kv_store: {}")
            + "roles: {agg: {workers: 1, gpus: 1}}\n")
    assert units(text)["svc-mooncake-master_0"].container == "job.sqsh"
    text = text.replace("mooncake_kv_store: {}", "mooncake_kv_store: {container: own.sqsh}")
    assert units(text)["svc-mooncake-master_0"].container == "own.sqsh"


def test_sglang_disaggregated_needs_the_mooncake_transfer_backend():
    with pytest.raises(RecipeError) as e:
        load(SGLANG_PD.format(pre="", dec=""))
    assert e.value.key == "roles.prefill.args" and "disaggregation-transfer-backend: mooncake" in e.value.message
    load(SGLANG_PD.format(pre="", dec="disaggregation_transfer_backend: mooncake"))  # either role, either spelling
    u = units(SGLANG_PD.format(pre="disaggregation-transfer-backend: mooncake",
                               dec="disaggregation-transfer-backend: mooncake"))
    assert {"MOONCAKE_MASTER", "MOONCAKE_LOCAL_HOSTNAME"} <= set(env_of(u["decode_0"]))
    # aggregated SGLang has no transfer to select
    load(SGLANG_PD.format(pre="", dec="").split("roles:")[0] + "roles: {agg: {workers: 1, gpus: 1}}\n")


def test_vllm_store_config_is_the_json_file_mooncake_config_path_names():
    with pytest.raises(RecipeError) as e:
        load(VLLM_PD.format(kvt='{"kv_connector":"NixlConnector","kv_role":"kv_both"}'))
    assert e.value.key == "roles.prefill.args" and "Mooncake connector" in e.value.message
    u = units(VLLM_PD.format(kvt=MOONCAKE_KVT), ["n1"])
    rpc = u["svc-mooncake-master_0"].ports["rpc"]
    for w in ("prefill_0", "decode_0"):
        env = env_of(u[w])
        path = env["MOONCAKE_CONFIG_PATH"]
        assert path == "/state/vl/configs/mooncake_store_config.json" and env["MC_STORE_CLIENT_METRIC"] == "1"
        assert json.loads(u[w].files[path]) == {"protocol": "tcp", "global_segment_size": "4GB",
                                                 "master_server_address": f"n1:{rpc}"}


def test_trtllm_writes_one_store_config_per_role_from_the_corpus_example():
    text = (CORPUS / "trtllm" / "dynamo-disagg-mooncake.yaml").read_text()
    r = load_text(text, "dynamo-disagg-mooncake.yaml", preflight=False)
    assert not any("mooncake_store_config" in k for k in r.not_acted_on), r.not_acted_on
    u = {f"{x.role}_{x.index}": x for x in render_units(r.recipe, ["h1"], Path("/state"))}
    rpc = u["svc-mooncake-master_0"].ports["rpc"]
    for role, store_role in (("prefill", "both"), ("decode", "capacity")):
        path = f"/state/{r.recipe.name}/configs/mooncake_store_config_{role}.json"
        assert env_of(u[f"{role}_0"])["MOONCAKE_CONFIG_PATH"] == path
        doc = json.loads(u[f"{role}_0"].files[path])
        assert doc == {"role": store_role, "model_key": "Qwen/Qwen3-0.6B", "protocol": "rdma",
                       "global_segment_size": "8GiB", "stage_through_host": True,
                       "master_server_address": f"h1:{rpc}"}


def test_trtllm_roles_without_the_mooncake_store_connector_get_no_file():
    text = (CORPUS / "trtllm" / "dynamo-disagg-mooncake.yaml").read_text()
    text = text.replace("      kv_connector_config:\n        connector: mooncake-store\n    mooncake_store_config:\n"
                        "      protocol: rdma\n      global_segment_size: 8GiB\n      stage_through_host: true\n  decode:",
                        "  decode:", 1)
    u = {f"{x.role}_{x.index}": x for x in render_units(load(text), ["h1"], Path("/state"))}
    assert "MOONCAKE_CONFIG_PATH" not in env_of(u["prefill_0"]) and "MOONCAKE_MASTER" in env_of(u["prefill_0"])
    assert "MOONCAKE_CONFIG_PATH" in env_of(u["decode_0"])


@pytest.mark.parametrize("extra, kv, role, key, words", [
    ("services:\n  - {name: m, type: mooncake-master}\n", ", mooncake_kv_store: {}", "",
     "engine.mooncake_kv_store", "declared twice"),
    ("services:\n  - {name: m, type: mooncake-master}\n  - {name: n, type: mooncake-master}\n", "", "",
     "services.1", "only one"),
    ("environment: {MOONCAKE_MASTER: 'h:1'}\n", ", mooncake_kv_store: {}", "", "environment.MOONCAKE_MASTER",
     "set by the reconciler"),
    ("", ", mooncake_kv_store: {}", ", env: {MOONCAKE_TE_META_DATA_SERVER: P2PHANDSHAKE}",
     "roles.agg.env.MOONCAKE_TE_META_DATA_SERVER", "set by the reconciler"),
    ("", ", mooncake_kv_store: {env: {MOONCAKE_CONFIG_PATH: /x}}", "",
     "engine.mooncake_kv_store.env.MOONCAKE_CONFIG_PATH", "set by the reconciler"),
    ("services:\n  - {name: m, type: mooncake-master, options: {eviction_ratio: 0.05}}\n", "", "",
     "services.0.options.eviction_ratio", "unsupported feature"),
    ("services:\n  - {name: m, type: mooncake-master, external: 'h:8700'}\n", "", "", "services.0.external",
     "unsupported feature"),
    ("services:\n  - {name: m, type: mooncake-master, options: {speed: 1}}\n", "", "", "services.0.options.speed",
     "unknown option"),
    ("", ", mooncake_kv_store: {device_names_by_gpu: [mlx5_0]}", "", "engine.mooncake_kv_store.device_names_by_gpu",
     "unsupported feature"),
    ("", ", mooncake_kv_store: {bogus: 1}", "", "engine.mooncake_kv_store.bogus", "unknown key"),
])
def test_bad_mooncake_recipes_are_located(extra, kv, role, key, words):
    with pytest.raises(RecipeError) as e:
        load(MOCKER.format(kv=kv, role=role, extra=extra))
    assert e.value.key == key and words in e.value.message and e.value.line is not None, str(e.value)


def test_a_v1_recipe_spells_it_backend_mooncake_kv_store():
    v1 = """\
name: v1mc
model: {path: /m, container: c.sqsh, precision: fp8}
resources: {gpu_type: h100, gpus_per_node: 8, prefill_nodes: 1, decode_nodes: 1, prefill_workers: 1, decode_workers: 1}
backend:
  type: sglang
  mooncake_kv_store: {env: {MOONCAKE_PROTOCOL: tcp}}
  sglang_config:
    prefill: {disaggregation-transfer-backend: mooncake}
    decode: {disaggregation-transfer-backend: mooncake}
"""
    u = units(v1, ["a", "b"])
    assert u["svc-mooncake-master_0"].nodes == ("a",)
    assert env_of(u["decode_0"])["MOONCAKE_LOCAL_HOSTNAME"] == "b"
    assert env_of(u["decode_0"])["MOONCAKE_MASTER"] == f"a:{u['svc-mooncake-master_0'].ports['rpc']}"
    with pytest.raises(RecipeError) as e:
        load(v1.replace("  mooncake_kv_store: {env: {MOONCAKE_PROTOCOL: tcp}}\n",
                        "  mooncake_kv_store: {env: {MOONCAKE_MASTER: 'x:1'}}\n"))
    assert e.value.line == 6 and "MOONCAKE_MASTER" in e.value.key, str(e.value)


def test_trtllm_store_config_keys_its_connector_does_not_read_are_refused():
    text = (CORPUS / "trtllm" / "dynamo-disagg-mooncake.yaml").read_text()
    for old, bad, key in (("global_segment_size: 8GiB", "global_segment_size: 8GB", "global_segment_size"),
                          ("stage_through_host: true", "stage_through_host: 'yes'", "stage_through_host"),
                          ("global_segment_size: 8GiB", "global_segment_size: 8GiB\n      run_dir: /x", "run_dir")):
        t = text.replace(old, bad, 1)
        with pytest.raises(RecipeError) as e:
            load(t)
        assert e.value.key == f"roles.prefill.mooncake_store_config.{key}", str(e.value)


def test_the_store_env_sits_under_the_workers_own_and_the_master_address_on_top():
    text = MOCKER.format(kv=", mooncake_kv_store: {env: {MOONCAKE_PROTOCOL: tcp, CUDA_VISIBLE_DEVICES: '7'}}",
                         role=", env: {MOONCAKE_PROTOCOL: rdma}", extra="")
    u = units(text)
    assert [env_of(u[w])["CUDA_VISIBLE_DEVICES"] for w in ("agg_0", "agg_1")] == ["0", "1"]
    assert env_of(u["agg_0"])["MOONCAKE_PROTOCOL"] == "rdma"  # the role's, over the recipe-wide store env
    pinned = units(MOCKER.format(kv=", mooncake_kv_store: {env: {MOONCAKE_LOCAL_HOSTNAME: 10.9.9.9}}", role="",
                                 extra=""))
    assert env_of(pinned["agg_0"])["MOONCAKE_LOCAL_HOSTNAME"] == "10.9.9.9"


@pytest.mark.parametrize("kv, key", [
    (", mooncake_kv_store: {master_extra_args: [--rpc_port=9000]}", "engine.mooncake_kv_store.master_extra_args"),
    (", mooncake_kv_store: {master_extra_args: ['--metrics_port', '9']}", "engine.mooncake_kv_store.master_extra_args"),
])
def test_the_masters_own_port_flags_are_refused(kv, key):
    with pytest.raises(RecipeError) as e:
        load(MOCKER.format(kv=kv, role="", extra=""))
    assert e.value.key == key and "ports" in e.value.message, str(e.value)
    with pytest.raises(RecipeError) as e:
        load(MOCKER.format(kv="", role="", extra="services:\n  - {name: m, type: mooncake-master, args: [--port=1]}\n"))
    assert e.value.key == "services.0.args"


def test_store_config_no_engine_here_reads_is_reported_as_carried():
    r = load_text(MOCKER.format(kv=", mooncake_kv_store: {store_config: {protocol: tcp}}", role="", extra=""), "r.yaml",
                  preflight=False)
    assert "engine.mooncake_kv_store.store_config" in r.not_acted_on
    text = (CORPUS / "trtllm" / "dynamo-disagg-mooncake.yaml").read_text()
    text = text.replace("      kv_connector_config:\n        connector: mooncake-store\n    mooncake_store_config:",
                        "    mooncake_store_config:", 1)
    r = load_text(text, "t.yaml", preflight=False)
    assert "roles.prefill.mooncake_store_config" in r.not_acted_on
    assert "roles.decode.mooncake_store_config" not in r.not_acted_on


def test_the_masters_readiness_waits_as_long_as_srtctls():
    (spec,) = resolve(load(MOCKER.format(kv=", mooncake_kv_store: {}", role="", extra="")))
    assert spec.readiness.timeout == 600.0
