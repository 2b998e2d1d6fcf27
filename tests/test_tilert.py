"""TileRT: a vLLM prefill role and TileRT decode workers (per-role engines of different types)
behind the TileRT router — srtctl's argv, ports and rules (render only: TileRT needs its GPU images)."""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.errors import RecipeError
from reconciler.desired.admission import load_recipe, load_text
from reconciler.desired.render import render_units

PD = """\
schema: 2
name: tl
model: {{path: /models/glm, container: tilert-decode}}
resources: {{gpus_per_node: 8}}
roles:
  prefill:
    engine: {pre_engine}
    container: tilert-prefill
    workers: {pre_workers}
    gpus: 8
    args:
      served-model-name: glm-5
      tensor-parallel-size: 8
      kv-transfer-config: '{{"kv_connector":"TileRTConnector","kv_role":"kv_producer"}}'
  decode:
    engine: {dec_engine}
    container: tilert-decode
    workers: 2
    gpus: {dec_gpus}
    args: {{model: glm5, model_weights_dir: /w, with-mtp: true, no-warmup: false, cuda_graph: [1, 2]}}
frontend:
  type: {fe}
  enable_multiple_frontends: {multi}
  container_image: tilert-router
  args: {{parser: none, queue_timeout: 1800}}
"""
DEFAULTS = dict(pre_engine="vllm", pre_workers=1, dec_engine="tilert", dec_gpus=8, fe="tilert-router", multi="false")


def text(**kw) -> str:
    return PD.format(**{**DEFAULTS, **kw})


def units(**kw) -> dict:
    r = load_text(text(**kw), "tl.yaml", preflight=False).recipe
    return {f"{u.role}_{u.index}": u for u in render_units(r, ["a", "b", "c"], Path("/s"))}


def test_decode_workers_run_the_tilert_server_and_the_prefill_runs_vllm():
    u = units()
    d0 = u["decode_0"]
    assert list(d0.launches[0].argv) == [
        "python3", "-m", "tilert.pd_vllm.decode_server", "--engine", "tilert", "--http-port", str(d0.ports["http"]),
        "--ctrl-port", str(d0.ports["ctrl"]), "--model", "glm5", "--model-weights-dir", "/w", "--with-mtp",
        "--cuda-graph", "1", "--cuda-graph", "2"]  # insertion order, '_' read as '-', a list repeats the flag
    assert d0.container == "tilert-decode" and d0.health_path == "/health" and d0.metrics_path is None
    pre = u["prefill_0"].launches[0].argv
    assert pre[:2] == ("vllm", "serve") and "--kv-transfer-config" in pre  # its own engine: vLLM's argv
    assert u["prefill_0"].container == "tilert-prefill"


def test_the_router_gets_the_prefill_url_and_every_decode_worker_after_one_flag():
    u = units()
    fe, pre = u["frontend_0"], u["prefill_0"]
    decs = [u["decode_0"], u["decode_1"]]
    assert list(fe.launches[0].argv) == [
        "python3", "-m", "tilert.pd_vllm.pd_router", "--vllm-url", f"http://{pre.nodes[0]}:{pre.ports['http']}",
        "--decode", *[f"{d.nodes[0]}:{d.ports['ctrl']}:{d.ports['http']}" for d in decs],
        "--host", "0.0.0.0", "--port", str(fe.health_port), "--parser", "none", "--queue-timeout", "1800"]
    assert fe.container == "tilert-router" and fe.health_path == "/health"


@pytest.mark.parametrize("change, key, words", [
    (dict(pre_engine="tilert"), "roles.prefill", "single-node decode workers only"),
    (dict(dec_gpus=16), "roles.decode", "single-node decode workers only"),
    (dict(multi="true"), "frontend.enable_multiple_frontends", "one router"),
    (dict(pre_workers=2), "roles.prefill.workers", "exactly one prefill worker"),
    (dict(fe="dynamo"), "", "do not support the Dynamo frontend"),
    (dict(dec_engine="vllm"), "frontend.type", "engine tilert"),
])
def test_refused_with_the_key_that_is_wrong(change, key, words):
    with pytest.raises(RecipeError) as e:
        load_text(text(**change), "tl.yaml", preflight=False)
    assert words in str(e.value) and (e.value.key or "") .startswith(key), (e.value.key, str(e.value))


def test_a_reserved_decode_arg_and_a_prefill_without_the_connector_are_refused():
    with pytest.raises(RecipeError) as e:
        load_text(text().replace("model: glm5,", "model: glm5, ctrl_port: 1,"), "tl.yaml", preflight=False)
    assert e.value.key == "roles.decode.args.ctrl_port"
    with pytest.raises(RecipeError) as e:
        load_text(text().replace("TileRTConnector", "NixlConnector"), "tl.yaml", preflight=False)
    assert e.value.key == "roles.prefill.args.kv-transfer-config"


@pytest.mark.parametrize("name", ["glm5-disagg.yaml", "glm5-rocm-mooncake-disagg.yaml"])
def test_the_corpus_tilert_examples_validate_and_render(corpus, name):
    r = load_recipe(corpus / "srt-slurm-v2" / "tilert" / name, None).recipe
    got = {f"{u.role}_{u.index}": u for u in render_units(r, ["a", "b"], Path("/s"))}
    assert sorted(got) == ["decode_0", "frontend_0", "prefill_0"]
    assert got["decode_0"].launches[0].argv[2] == "tilert.pd_vllm.decode_server"
    assert got["frontend_0"].launches[0].argv[2] == "tilert.pd_vllm.pd_router"
