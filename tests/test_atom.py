"""ATOM behind AToMesh: srtctl's worker argv, the Mooncake KV-transfer entry, the static
router's command line, and the validation rules (render only: ATOM needs ROCm GPUs)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reconciler.errors import RecipeError
from reconciler.desired.admission import load_text
from reconciler.desired.render import render_units

BASE = """\
schema: 2
name: atom
model: {{path: /models/dsr1}}
resources: {{gpus_per_node: 8}}
engine: {engine}
frontend: {{type: {fe}{fe_args}}}
roles:
{roles}"""
PD = ("  prefill:\n    workers: 1\n    gpus: 4\n    args:\n      kv_cache_dtype: fp8\n      trust-remote-code: true\n"
      "      disable-log-stats: false\n      extra-kv-connectors: [{kv_connector: lmcache_mp, kv_role: kv_both}]\n"
      "  decode: {workers: 2, gpus: 4, args: {gpu-memory-utilization: 0.9, cuda-graph-sizes: [1, 2, 4]}}\n")
AGG = "  agg: {workers: 2, gpus: 4, args: {block-size: 16}}\n"


def text(roles: str = PD, engine: str = "{type: atom, mooncake_protocol: tcp}", fe: str = "atomesh",
         fe_args: str = "") -> str:
    return BASE.format(engine=engine, fe=fe, fe_args=fe_args, roles=roles)


def units(roles: str = PD, **kw) -> dict:
    r = load_text(text(roles, **kw), "atom.yaml", preflight=False).recipe
    return {f"{u.role}_{u.index}": u for u in render_units(r, ["a", "b", "c"], Path("/s"))}


def kv(argv: tuple[str, ...]) -> dict:
    return json.loads(argv[argv.index("--kv-transfer-config") + 1])


def test_prefill_and_decode_get_the_mooncake_entry_with_their_node_and_handshake_port():
    u = units()
    pre, dec = u["prefill_0"], u["decode_0"]
    (lp,) = pre.launches
    p = pre.ports
    assert list(lp.argv) == [
        "python3", "-m", "atom.entrypoints.openai_server", "--model", "/models/dsr1", "--host", "0.0.0.0",
        "--server-port", str(p["http"]), "-tp", "4", "--kv-transfer-config", lp.argv[12],
        "--kv_cache_dtype", "fp8", "--trust-remote-code"]  # sorted, ATOM's own spelling, false dropped
    assert kv(lp.argv) == {"kv_connector": "multi", "connectors": [
        {"kv_role": "kv_producer", "kv_connector": "mooncake", "proxy_ip": "a", "handshake_port": p["handshake"],
         "protocol": "tcp"},
        {"kv_connector": "lmcache_mp", "kv_role": "kv_both", "kv_connector_extra_config": {"lmcache.mp.port": 8750}}]}
    assert lp.argv[12] == json.dumps(kv(lp.argv), separators=(",", ":"))  # compact, keys in srtctl's order
    assert dict(lp.env)["ATOM_HOST_IP"] == "a" and dict(lp.env)["CUDA_VISIBLE_DEVICES"] == "0,1,2,3"
    (ld,) = dec.launches
    assert kv(ld.argv) == {"kv_role": "kv_consumer", "kv_connector": "mooncake", "proxy_ip": dec.nodes[0],
                           "handshake_port": dec.ports["handshake"], "protocol": "tcp"}
    assert list(ld.argv[13:]) == ["--cuda-graph-sizes", "1", "2", "4", "--gpu-memory-utilization", "0.9"]
    assert pre.health_path == "/health" and pre.metrics_path is None and pre.probe == "http"


def test_the_router_is_atomesh_with_every_worker_url_on_its_command_line():
    u = units(fe_args=", args: {policy: cache_aware, worker_startup_timeout_secs: 600}")
    fe = u["frontend_0"]
    urls = {k: f"http://{v.nodes[0]}:{v.ports['http']}" for k, v in u.items() if k != "frontend_0"}
    assert list(fe.launches[0].argv) == [
        "atomesh", "launch", "--pd-disaggregation", "--prefill", urls["prefill_0"], "--decode", urls["decode_0"],
        "--decode", urls["decode_1"], "--host", "0.0.0.0", "--port", str(fe.health_port), "--backend", "atom",
        "--policy", "cache_aware", "--worker-startup-timeout-secs", "600"]
    assert fe.health_path == "/workers"


def test_aggregated_workers_get_no_kv_config_and_one_extra_connector_is_passed_alone():
    u = units(AGG)
    assert "--kv-transfer-config" not in u["agg_0"].launches[0].argv
    assert list(u["frontend_0"].launches[0].argv[:5]) == [
        "atomesh", "launch", "--worker-urls", f"http://a:{u['agg_0'].ports['http']}",
        f"http://{u['agg_1'].nodes[0]}:{u['agg_1'].ports['http']}"]
    one = AGG.replace("{block-size: 16}", "{extra-kv-connectors: [{kv_connector: lmcache_offload, kv_role: offload}]}")
    assert kv(units(one)["agg_0"].launches[0].argv) == {"kv_connector": "lmcache_offload", "kv_role": "offload"}
    own_port = one.replace("kv_role: offload}", "kv_role: offload}, {kv_connector: lmcache_mp, "
                                                "kv_connector_extra_config: {lmcache.mp.port: 9000}}")
    conns = kv(units(own_port)["agg_0"].launches[0].argv)["connectors"]
    assert conns[1]["kv_connector_extra_config"] == {"lmcache.mp.port": 9000}  # the recipe's port wins


@pytest.mark.parametrize("change, key, words", [
    (dict(fe="sglang-router"), "frontend.type", "requires frontend.type: atomesh"),
    (dict(roles=AGG.replace("block-size", "tp")), "roles.agg.args.tp", "set by the reconciler"),
    (dict(roles=AGG.replace("block-size: 16", "server_port: 1")), "roles.agg.args.server_port", "set by the reconciler"),
    (dict(roles=AGG.replace("gpus: 4", "gpus: 16")), "roles.agg", "one Slurm node"),
    (dict(roles=AGG.replace("block-size: 16", "extra-kv-connectors: lmcache")), "roles.agg.args.extra-kv-connectors",
     "list of connector mappings"),
    (dict(engine="{type: atom, connector: nixl}"), "engine.connector", "mooncake"),
    (dict(engine="vllm", roles=AGG), "frontend.type", "routes ATOM workers only"),
    (dict(roles=AGG, fe_args=", args: {backend: vllm}"), "frontend.args.backend", "sets --backend itself"),
])
def test_refused_with_the_key_that_is_wrong(change, key, words):
    with pytest.raises(RecipeError) as e:
        load_text(text(**change), "atom.yaml", preflight=False)
    assert e.value.key == key and words in str(e.value), str(e.value)


def test_atomesh_in_front_of_a_vllm_prefill_and_atom_decode_is_refused():
    mixed = text(engine="atom").replace("engine: atom\n", "").replace(
        "  prefill:\n", "  prefill:\n    engine: vllm\n").replace("  decode: {", "  decode: {engine: atom, ")
    with pytest.raises(RecipeError) as e:
        load_text(mixed, "atom.yaml", preflight=False)
    assert e.value.key == "frontend.type" and "every role" in str(e.value) and "vllm" in str(e.value)
