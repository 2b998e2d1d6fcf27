"""TokenSpeed: srtctl's argv behind SMG (gRPC) and behind Dynamo, its ports and environment."""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.errors import RecipeError
from reconciler.desired.admission import load_text
from reconciler.desired.render import render_units

BASE = """\
name: ts
model: {{path: /models/q}}
resources: {{gpus_per_node: 8}}
engine: tokenspeed
frontend: {{type: {fe}}}
roles:
{roles}"""
PD = ("  prefill: {nodes: 2, workers: 1, args: {served-model-name: Q, tp-size: 16, model-path: ignored}}\n"
      "  decode: {workers: 1, gpus: 4, args: {tp-size: 4}}\n")


def units(fe: str, roles: str = PD) -> dict:
    r = load_text(BASE.format(fe=fe, roles=roles), "ts.yaml", preflight=False).recipe
    return {f"{u.role}_{u.index}": u for u in render_units(r, ["a", "b", "c"], Path("/s"))}


def test_behind_smg_each_process_runs_the_grpc_engine_on_its_own_port():
    u = units("sglang-router")
    pre = u["prefill_0"]
    p = pre.ports
    rank0, rank1 = (list(l.argv) for l in pre.launches)
    assert rank0 == ["python3", "-m", "smg_grpc_servicer.tokenspeed", "--model", "/models/q", "--served-model-name",
                     "Q", "--host", "a", "--port", str(p["tokenspeed"]), "--dist-init-addr", f"a:{p['dist_init']}",
                     "--nnodes", "2", "--node-rank", "0", "--disaggregation-mode", "prefill",
                     "--disaggregation-bootstrap-port", str(p["bootstrap"]), "--tp-size", "16"]
    assert rank1[rank1.index("--host") + 1] == "b" and rank1[rank1.index("--node-rank") + 1] == "1"
    assert rank1[rank1.index("--dist-init-addr") + 1] == f"a:{p['dist_init']}"  # the leader's block
    # the rendezvous block: 6 + 16 GPUs consecutive ports on the leader, the engine's port outside it
    assert not p["dist_init"] <= p["tokenspeed"] < p["dist_init"] + 22
    assert pre.url == f"grpc://a:{p['tokenspeed']}" and pre.probe == "tcp" and pre.health_port == p["tokenspeed"]
    dec = u["decode_0"]
    assert "--disaggregation-bootstrap-port" not in dec.launches[0].argv
    assert dict(dec.launches[0].env)["TOKENSPEED_SKIP_GRPC_WARMUP"] == "1"
    assert dec.launches[0].argv[dec.launches[0].argv.index("--served-model-name") + 1] == "Q"  # prefill's name


def test_an_aggregated_worker_keeps_the_grpc_warmup():
    u = units("none", "  agg: {workers: 1, gpus: 8}\n")
    assert "TOKENSPEED_SKIP_GRPC_WARMUP" not in dict(u["agg_0"].launches[0].env)
    assert "--disaggregation-mode" not in u["agg_0"].launches[0].argv


def test_behind_dynamo_it_registers_through_dynamo_tokenspeed():
    u = units("dynamo")
    dec = u["decode_0"]
    argv, env = list(dec.launches[0].argv), dict(dec.launches[0].env)
    assert argv[:3] == ["python3", "-m", "dynamo.tokenspeed"]
    assert env["DYN_SYSTEM_PORT"] == str(dec.ports["system"]) and env["ETCD_ENDPOINTS"].startswith("http://a:")
    assert dec.probe == "dynamo" and dec.url.startswith("http://")


def test_a_router_that_cannot_speak_grpc_is_refused():
    with pytest.raises(RecipeError) as e:
        load_text(BASE.format(fe="builtin", roles="  agg: {workers: 1, gpus: 8}\n"), "ts.yaml", preflight=False)
    assert e.value.key == "frontend.type" and "gRPC" in e.value.message


def test_the_sglang_router_is_given_grpc_urls():
    from reconciler.shell.readiness.router_sync import wanted
    from reconciler.world import DesiredRecipe, Observed

    u = units("sglang-router", "  agg: {workers: 1, gpus: 8}\n")
    w = u["agg_0"]
    d = DesiredRecipe("ts", 1, (), (), (w,), (), u["frontend_0"], False)
    o = Observed(ready={w.key: True})
    assert list(wanted(d, o)) == [f"grpc://a:{w.ports['tokenspeed']}"]
