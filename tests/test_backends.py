"""Golden argv / env per backend and mode, rendered through the same path the reconciler launches."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import ROOT
from reconciler.errors import RecipeError
from reconciler.recipe.load import load_recipe, load_text
from reconciler.render import as_rows, render_units

STATE = Path("/st")


def rows(text: str, nodes=None, python="py"):
    recipe = load_text(text, "t.yaml").recipe
    return as_rows(render_units(recipe, nodes, STATE, python=python))


def one(rs, role, index=0, rank=0):
    (r,) = [x for x in rs if x["role"] == role and x["index"] == index and x["rank"] == rank]
    return r


SGLANG_DISAGG = """\
name: sg
model: {path: /models/q}
resources: {gpus_per_node: 8}
frontend: {type: %s}
engine: sglang
roles:
  prefill: {nodes: 1, workers: 1, gpus: 4, args: {tensor-parallel-size: 4, mem-fraction-static: 0.8}, env: {A: "1"}}
  decode: {nodes: colocate, workers: 1, gpus: 4, args: {tensor-parallel-size: 4}}
"""


def test_sglang_disagg_direct():
    rs = rows(SGLANG_DISAGG % "sglang-router")
    p, d = one(rs, "prefill"), one(rs, "decode")
    assert p["argv"] == [
        "python3", "-m", "sglang.launch_server", "--model-path", "/models/q", "--host", "0.0.0.0",
        "--port", str(p["ports"]["http"]), "--disaggregation-mode", "prefill",
        "--disaggregation-bootstrap-port", str(p["ports"]["bootstrap"]),
        "--tensor-parallel-size", "4", "--mem-fraction-static", "0.8",
    ]
    assert p["env"] == {"A": "1", "CUDA_VISIBLE_DEVICES": "0,1,2,3"}
    assert d["argv"][:3] == ["python3", "-m", "sglang.launch_server"]
    assert d["argv"][9:11] == ["--disaggregation-mode", "decode"] and "--disaggregation-bootstrap-port" not in d["argv"]
    assert d["env"] == {"CUDA_VISIBLE_DEVICES": "4,5,6,7"}
    assert d["nodes"] == p["nodes"] == ["node1"]


def test_sglang_behind_dynamo_uses_dynamo_module_and_system_port():
    p = one(rows(SGLANG_DISAGG % "dynamo"), "prefill")
    assert p["argv"][:3] == ["python3", "-m", "dynamo.sglang"]
    assert p["env"]["DYN_SYSTEM_PORT"] == str(p["ports"]["system"])
    assert p["health"].endswith(f":{p['ports']['system']}/health")


def test_sglang_multi_node_rendezvous():
    rs = rows("""\
name: mn
model: {path: /m}
resources: {gpus_per_node: 4}
frontend: {type: sglang-router}
engine: sglang
roles: {agg: {nodes: 2, workers: 1, gpus: 8, args: {tp: 8}}}
""")
    r0, r1 = one(rs, "agg", rank=0), one(rs, "agg", rank=1)
    addr = f"node1:{r0['ports']['dist_init']}"
    for rank, r in ((0, r0), (1, r1)):
        i = r["argv"].index("--dist-init-addr")
        assert r["argv"][i:i + 6] == ["--dist-init-addr", addr, "--nnodes", "2", "--node-rank", str(rank)]
        assert "CUDA_VISIBLE_DEVICES" not in r["env"]  # whole nodes
    assert (r0["nodes"], r1["nodes"]) == (["node1"], ["node2"])


VLLM = """\
name: vl
model: {path: /models/q}
resources: {gpus_per_node: 8}
frontend: {type: %s}
engine: {type: vllm, connector: %s}
roles:
  prefill: {nodes: 1, workers: 1, gpus: 2, args: {tensor-parallel-size: 2}}
  decode: {nodes: colocate, workers: 2, gpus: 2, args: {tensor-parallel-size: 2, connector: lmcache}}
"""


@pytest.mark.parametrize("knob", ["set_visible_devices", "set_cuda_visible_devices"])
def test_vllm_visible_devices_mask_instead_of_device_ids(knob):
    rs = rows((VLLM % ("vllm-router", "nixl")).replace("connector: nixl}", f"connector: nixl, {knob}: true}}"))
    d = one(rs, "decode", 1)
    assert d["env"]["CUDA_VISIBLE_DEVICES"] == "4,5"
    assert "--device-ids" not in d["argv"]


def test_vllm_direct_disagg_connector_table():
    rs = rows(VLLM % ("vllm-router", "nixl"))
    p, d = one(rs, "prefill"), one(rs, "decode", 1)
    assert p["argv"][:3] == ["vllm", "serve", "/models/q"]
    i = p["argv"].index("--kv-transfer-config")
    assert json.loads(p["argv"][i + 1]) == {"kv_connector": "NixlConnector", "kv_role": "kv_producer"}
    j = d["argv"].index("--kv-transfer-config")
    assert json.loads(d["argv"][j + 1]) == {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_consumer"}
    assert "--connector" not in d["argv"]  # a role's connector picks the table entry, it is not an engine flag
    # srtctl's default for vLLM: the engine is told its GPUs, no environment mask
    assert "CUDA_VISIBLE_DEVICES" not in d["env"]
    k = d["argv"].index("--device-ids")
    assert d["argv"][k + 1] == "4,5" and k < d["argv"].index("--tensor-parallel-size")
    assert p["env"]["VLLM_NIXL_SIDE_CHANNEL_PORT"] == str(p["ports"]["nixl"])


def test_vllm_behind_dynamo_prefill_flag():
    p = one(rows(VLLM % ("dynamo", "nixl")), "prefill")
    assert p["argv"][:5] == ["python3", "-m", "dynamo.vllm", "--model", "/models/q"]
    assert "--is-prefill-worker" in p["argv"]


def test_vllm_multi_node_data_parallel_per_node():
    rs = rows("""\
name: dp
model: {path: /m}
resources: {gpus_per_node: 4}
frontend: {type: vllm}
engine: vllm
roles: {agg: {nodes: 2, workers: 1, gpus: 8, args: {tensor-parallel-size: 2, data-parallel-size: 4}}}
""")
    r0, r1 = one(rs, "agg", rank=0), one(rs, "agg", rank=1)
    def opt(r, flag):
        return r["argv"][r["argv"].index(flag) + 1]
    assert opt(r0, "--data-parallel-size-local") == "2" and opt(r0, "--data-parallel-start-rank") == "0"
    assert opt(r1, "--data-parallel-start-rank") == "2" and opt(r1, "--data-parallel-address") == "node1"
    assert "--headless" in r1["argv"] and "--headless" not in r0["argv"]


def test_trtllm_is_one_mpi_launch_per_endpoint_with_config_file():
    rs = rows("""\
name: tr
model: {path: /m, container: trt.sqsh}
resources: {gpus_per_node: 8}
frontend: {type: dynamo}
engine: {type: trtllm, served_model_name: served}
roles:
  prefill: {nodes: 1, workers: 1, gpus: 8, args: {tensor_parallel_size: 8, kv_cache_config: {free_gpu_memory_fraction: 0.5}}}
  decode: {nodes: 2, workers: 1, gpus: 16, args: {tensor_parallel_size: 16}}
""")
    assert len(rs) == 2  # one launch per endpoint, not per node
    d = one(rs, "decode")
    assert d["nodes"] == ["node2", "node3"] and d["ntasks"] == 16 and d["mpi"] == "pmix"
    assert d["argv"][:3] == ["python3", "-m", "dynamo.trtllm"]
    assert d["argv"][d["argv"].index("--disaggregation-mode") + 1] == "decode"
    assert d["argv"][d["argv"].index("--served-model-name") + 1] == "served"
    assert d["container"] == "trt.sqsh"
    assert d["files"] == ["/st/tr/configs/trtllm_decode.yaml"]
    recipe = load_text(
        "name: tr\nmodel: {path: /m}\nengine: trtllm\nresources: {gpus_per_node: 8}\n"
        "roles: {agg: {nodes: 1, workers: 1, gpus: 8, args: {kv_cache_config: {free_gpu_memory_fraction: 0.5}}}}\n",
        "t.yaml",
    ).recipe
    (u,) = render_units(recipe, None, STATE)
    assert yaml.safe_load(u.files["/st/tr/configs/trtllm_agg.yaml"]) == {"kv_cache_config": {"free_gpu_memory_fraction": 0.5}}


def test_trtllm_native_serve():
    rs = rows("""\
name: ts
model: {path: /m}
resources: {gpus_per_node: 8}
frontend: {type: trtllm_serve}
engine: trtllm
roles: {agg: {nodes: 1, workers: 1, gpus: 8, extra_args: ["--tool_parser", "x"]}}
""")
    a = one(rs, "agg")
    assert a["argv"][:2] == ["trtllm-serve", "/m"]
    assert a["argv"][-2:] == ["--tool_parser", "x"]


MOCKER = """\
name: mk
model: {path: hf:Org/Model}
resources: {gpus_per_node: 8}
frontend: {type: %s}
engine: {type: mocker, speedup_ratio: 50, max_num_seqs: 8, enable_prefix_caching: false}
roles:
  agg: {workers: 2, gpus: 1, args: {num-gpu-blocks-override: 512, crash-after: 30}}
"""


def test_mocker_builtin_renders_our_engine_and_router():
    rs = rows(MOCKER % "builtin")
    a = one(rs, "agg", 1)
    argv = a["argv"]
    assert argv[:3] == ["py", "-m", "reconciler.mocker"]
    assert argv[argv.index("--model-name") + 1] == "Org/Model"
    assert argv[argv.index("--speedup-ratio") + 1] == "50.0"
    assert argv[argv.index("--num-gpu-blocks") + 1] == "512"  # role args override engine knobs
    assert argv[argv.index("--max-num-seqs") + 1] == "8"
    assert "--no-enable-prefix-caching" in argv
    assert argv[-2:] == ["--crash-after", "30"]
    assert a["container"] is None
    fe = one(rs, "frontend")
    assert fe["argv"][:3] == ["py", "-m", "reconciler.router"]
    assert fe["argv"][fe["argv"].index("--endpoints-file") + 1] == "/st/mk/endpoints.json"
    assert fe["ports"]["http"] not in {r["ports"]["http"] for r in rs if r["role"] == "agg"}


def test_mocker_behind_dynamo_renders_dynamo_mocker():
    a = one(rows(MOCKER % "dynamo"), "agg")
    assert a["argv"][:3] == ["python3", "-m", "dynamo.mocker"]
    assert "--num-gpu-blocks-override" in a["argv"]
    assert not any(r["role"] == "frontend" for r in rows(MOCKER % "dynamo"))


@pytest.mark.parametrize("value", ["two words", "it's \"quoted\"", "$(rm -rf /)", "a; b && c", "`x`|y>z"])
def test_args_reach_argv_verbatim(value):
    text = SGLANG_DISAGG % "sglang-router"
    data = yaml.safe_load(text)
    data["roles"]["prefill"]["args"]["chat-template"] = value
    data["roles"]["prefill"]["env"]["TRICKY"] = value
    p = one(rows(yaml.safe_dump(data)), "prefill")
    i = p["argv"].index("--chat-template")
    assert p["argv"][i + 1] == value
    assert p["env"]["TRICKY"] == value


def test_trtllm_spec_hash_covers_config_file_content():
    base = "name: h\nmodel: {path: /m}\nengine: trtllm\nresources: {gpus_per_node: 8}\nroles: {agg: {workers: 1, gpus: 8, nodes: 1, args: {x: %d}}}\n"
    h1 = one(rows(base % 1), "agg")["spec_hash"]
    h2 = one(rows(base % 2), "agg")["spec_hash"]
    assert h1 != h2


def test_spec_hash_ignores_worker_count():
    a = rows(MOCKER % "builtin")
    b = rows((MOCKER % "builtin").replace("workers: 2", "workers: 3"))
    assert one(a, "agg", 0)["spec_hash"] == one(b, "agg", 0)["spec_hash"]


def test_every_valid_corpus_recipe_renders(corpus):
    n = 0
    for f in sorted(corpus.rglob("*.yaml")):
        try:
            recipe = load_recipe(f).recipe
        except RecipeError:
            continue
        assert as_rows(render_units(recipe, None, STATE)), f
        n += 1
    assert n > 500


def run_render(*args):
    return subprocess.run([sys.executable, "-m", "reconciler.cli", "render", *args], capture_output=True, text=True, cwd=ROOT)


@pytest.mark.parametrize(
    "recipe",
    [
        "srt-slurm-v2/sglang/dynamo-disagg.yaml",
        "srt-slurm-v2/vllm/dynamo-disagg.yaml",
        "srt-slurm-v2/trtllm/dynamo-disagg-multinode.yaml",
        "srt-slurm-v2/mocker/aggregated.yaml",
    ],
)
def test_render_cli_json_on_corpus(corpus, recipe):
    r = run_render(str(corpus / recipe), "-o", "json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)["processes"]
    assert data and all({"role", "index", "nodes", "gpus", "ports", "env", "argv", "metrics"} <= set(d) for d in data)


def test_render_cli_with_explicit_nodes_and_text_output():
    r = run_render("manifests/mocker-disagg.yaml", "--nodes", "gpu07")
    assert r.returncode == 0, r.stderr
    assert "prefill_0  nodes=gpu07" in r.stdout and "argv:" in r.stdout
    r = run_render("manifests/mocker-disagg.yaml", "--nodes", "")
    assert r.returncode == 0
    bad = run_render(str(ROOT / "nope.yaml"))
    assert bad.returncode == 1 and "cannot read" in bad.stderr


@pytest.mark.parametrize("engine,flag", [("sglang", "--model-path"), ("vllm", "--model"), ("trtllm", "--model-path")])
def test_hf_model_path_reaches_the_engine_as_the_bare_id(engine, flag):
    rs = rows(f"name: hf\nmodel: {{path: 'hf:Qwen/Qwen3-0.6B'}}\nresources: {{gpus_per_node: 8}}\n"
              f"engine: {engine}\nroles: {{agg: {{workers: 1, gpus: 1}}}}\n")
    argv = one(rs, "agg")["argv"]
    assert argv[argv.index(flag) + 1] == "Qwen/Qwen3-0.6B"
    assert not any(a.startswith("hf:") for a in argv)
