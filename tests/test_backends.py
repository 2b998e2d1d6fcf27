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
from reconciler.desired.admission import load_recipe, load_text
from reconciler.desired.render import as_rows, render_units
from rendered import assert_renders_its_workers

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
        "python3", "-m", "sglang.launch_server", "--model-path", "/models/q", "--served-model-name", "q",
        "--host", "0.0.0.0", "--port", str(p["ports"]["http"]), "--nccl-port", str(p["ports"]["nccl"]),
        "--enable-metrics", "--disaggregation-mode", "prefill", "--skip-server-warmup",
        "--disaggregation-bootstrap-port", str(p["ports"]["bootstrap"]),
        "--mem-fraction-static", "0.8", "--tensor-parallel-size", "4",  # role args sorted, as srtctl
    ]
    no_dumps = {"SGLANG_CUDA_COREDUMP_BEFORE_CRASH": "0", "SGLANG_PYSPY_DUMP_BEFORE_CRASH": "0"}
    assert p["env"] == {"A": "1", "CUDA_VISIBLE_DEVICES": "0,1,2,3", **no_dumps}
    assert d["argv"][:3] == ["python3", "-m", "sglang.launch_server"]
    assert d["argv"][d["argv"].index("--disaggregation-mode") + 1] == "decode"
    assert "--disaggregation-bootstrap-port" not in d["argv"]
    assert d["env"] == {"CUDA_VISIBLE_DEVICES": "4,5,6,7", **no_dumps}
    assert p["ports"]["nccl"] != d["ports"]["nccl"]
    assert d["nodes"] == p["nodes"] == ["node1"]


def test_sglang_multi_node_prefill_shares_one_bootstrap_port_across_ranks():
    rs = rows("name: mn\nmodel: {path: /m}\nresources: {gpus_per_node: 4}\nengine: sglang\n"
              "frontend: {type: sglang-router}\nroles:\n  prefill: {nodes: 2, workers: 1, gpus: 8}\n"
              "  decode: {nodes: 1, workers: 1, gpus: 4}\n")
    r0, r1 = one(rs, "prefill", rank=0), one(rs, "prefill", rank=1)
    assert _opt(r0, "--disaggregation-bootstrap-port") == _opt(r1, "--disaggregation-bootstrap-port")
    assert _opt(r0, "--dist-init-addr") == _opt(r1, "--dist-init-addr")


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
    # srtctl (and Dynamo's own table): kv_both on both sides
    assert json.loads(p["argv"][i + 1]) == {"kv_connector": "NixlConnector", "kv_role": "kv_both"}
    j = d["argv"].index("--kv-transfer-config")
    assert json.loads(d["argv"][j + 1]) == {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"}
    assert p["argv"][3:7] == ["--host", "0.0.0.0", "--port", str(p["ports"]["http"])]
    assert "--connector" not in d["argv"]  # a role's connector picks the table entry, it is not an engine flag
    # srtctl's default for vLLM: the engine is told its GPUs, no environment mask
    assert "CUDA_VISIBLE_DEVICES" not in d["env"]
    k = d["argv"].index("--device-ids")
    assert d["argv"][k + 1] == "4,5" and k < d["argv"].index("--tensor-parallel-size")
    assert p["env"]["VLLM_NIXL_SIDE_CHANNEL_PORT"] == str(p["ports"]["nixl"])


def test_vllm_behind_dynamo_disaggregation_mode_and_no_host_port():
    rs = rows(VLLM % ("dynamo", "nixl"))
    p, d = one(rs, "prefill"), one(rs, "decode", 1)
    assert p["argv"][:5] == ["python3", "-m", "dynamo.vllm", "--model", "/models/q"]
    for r, mode in ((p, "prefill"), (d, "decode")):
        argv = r["argv"]
        assert argv[argv.index("--disaggregation-mode") + 1] == mode
        assert "--is-prefill-worker" not in argv and "--host" not in argv and "--port" not in argv
        assert argv[argv.index("--served-model-name") + 1] == "q"
        assert argv[argv.index("--request-plane") + 1] == "tcp"
        assert r["env"]["DYN_VLLM_KV_EVENT_PORT"] == str(r["ports"]["kv_events"])
        assert r["env"]["DYN_SYSTEM_PORT"] == str(r["ports"]["system"])
    assert len({p["ports"]["kv_events"], p["ports"]["system"], p["ports"]["nixl"], p["ports"]["http"]}) == 4


def _opt(r, flag):
    return r["argv"][r["argv"].index(flag) + 1]


def test_vllm_direct_frontend_is_srtctls_vllm_serve_on_the_frontend_port():
    """srtctl: vllm serve <model> --host --port 8000 --device-ids, then the role args with the served
    name and the connector among them, sorted; here the port is frontend.port (else allocated)."""
    text = ("name: d\nmodel: {path: /m}\nresources: {gpus_per_node: 8}\nfrontend: {type: vllm, port: 8000}\n"
            "engine: {type: vllm, connector: nixl}\nroles: {agg: {workers: 1, gpus: 1, args: {tensor-parallel-size: 1, "
            "max-model-len: 4096, connector: nixl, gpu-memory-utilization: 0.5}}}\n")
    (a,) = [r for r in rows(text) if r["role"] == "agg"]
    assert a["argv"] == ["vllm", "serve", "/m", "--host", "0.0.0.0", "--port", "8000", "--device-ids", "0",
                         "--gpu-memory-utilization", "0.5", "--kv-transfer-config",
                         json.dumps({"kv_connector": "NixlConnector", "kv_role": "kv_both"}), "--max-model-len",
                         "4096", "--served-model-name", "m", "--tensor-parallel-size", "1"]
    assert a["health"] == "http://node1:8000/health"
    allocated = one(rows(text.replace(", port: 8000", "")), "agg")
    assert _opt(allocated, "--port") == str(allocated["ports"]["http"]) != "8000"


def test_vllm_scan_range_config_dump_and_kv_events_as_srtctl():
    """srtctl: VLLM_PORT is a private 50-port base per process; dynamo.vllm gets --dump-config-to and,
    for a role with kv_events, --kv-events-config publishing on the process's KV-event port."""
    text = (VLLM % ("dynamo", "nixl")).replace("decode: {", "decode: {kv_events: {topic: kv, buffer_steps: 4}, ")
    rs = rows(text)
    p, d0, d1 = one(rs, "prefill"), one(rs, "decode", 0), one(rs, "decode", 1)
    bases = sorted(int(r["env"]["VLLM_PORT"]) for r in (p, d0, d1) if r["nodes"] == d0["nodes"])
    assert all(b - a >= 50 for a, b in zip(bases, bases[1:]))  # the ranges do not overlap on a node
    assert _opt(d1, "--dump-config-to") == f"/st/vl/configs/{d1['nodes'][0]}_decode_w1_r0_config.json"
    assert json.loads(_opt(d1, "--kv-events-config")) == {
        "publisher": "zmq", "topic": "kv", "enable_kv_cache_events": True, "buffer_steps": 4,
        "endpoint": f"tcp://*:{d1['ports']['kv_events']}"}
    assert "--kv-events-config" not in p["argv"]
    direct = one(rows(VLLM % ("vllm-router", "nixl")), "prefill")
    assert "VLLM_PORT" in direct["env"] and "--dump-config-to" not in direct["argv"]


VLLM_DP = """\
name: dp
model: {path: /m}
resources: {gpus_per_node: 4}
frontend: {type: %s}
engine: vllm
roles: {agg: {nodes: 2, workers: 1, gpus: 8, args: {tensor-parallel-size: 2, data-parallel-size: 4}}}
"""


def test_vllm_data_parallel_per_node_behind_dynamo_every_node_serves():
    r0, r1 = (one(rows(VLLM_DP % "dynamo"), "agg", rank=k) for k in (0, 1))
    assert _opt(r0, "--data-parallel-size-local") == "2" and _opt(r0, "--data-parallel-start-rank") == "0"
    assert _opt(r1, "--data-parallel-start-rank") == "2" and _opt(r1, "--data-parallel-address") == "node1"
    assert _opt(r0, "--data-parallel-rpc-port") == _opt(r1, "--data-parallel-rpc-port") == str(r0["ports"]["dp_rpc"])
    for r in (r0, r1):
        assert "--data-parallel-hybrid-lb" in r["argv"] and "--headless" not in r["argv"]
        assert "--master-addr" not in r["argv"]
    # vLLM opens the NIXL side channel at base + DP rank: 4 consecutive ports held per node
    assert r0["ports"]["nixl"] not in range(r0["ports"]["system"] - 3, r0["ports"]["system"] + 1)


def test_vllm_data_parallel_behind_a_plain_frontend_uses_torch_rendezvous():
    r0, r1 = (one(rows(VLLM_DP % "vllm"), "agg", rank=k) for k in (0, 1))
    assert [_opt(r1, f) for f in ("--master-addr", "--nnodes", "--node-rank")] == ["node1", "2", "1"]
    assert _opt(r1, "--data-parallel-address") == "node1" and "--headless" in r1["argv"]
    assert "--headless" not in r0["argv"] and "--data-parallel-size-local" not in r0["argv"]
    assert "--host" in r0["argv"] and "--host" not in r1["argv"]  # only the leader serves


def test_vllm_tensor_parallel_across_nodes_is_not_data_parallel():
    rs = rows("name: tp\nmodel: {path: /m}\nresources: {gpus_per_node: 4}\nengine: vllm\n"
              "roles: {agg: {nodes: 2, workers: 1, gpus: 8, args: {tensor-parallel-size: 8}}}\n")
    r0, r1 = one(rs, "agg", rank=0), one(rs, "agg", rank=1)
    assert [_opt(r0, f) for f in ("--master-addr", "--nnodes", "--node-rank")] == ["node1", "2", "0"]
    assert _opt(r1, "--node-rank") == "1" and "--headless" in r1["argv"]
    assert not any(a.startswith("--data-parallel") for a in r0["argv"] + r1["argv"])


def test_vllm_single_node_data_parallel_gets_its_own_rpc_port():
    rs = rows("name: dp1\nmodel: {path: /m}\nresources: {gpus_per_node: 8}\nengine: vllm\nfrontend: {type: vllm}\n"
              "roles: {agg: {workers: 2, gpus: 4, args: {data-parallel-size: 4, data-parallel-rpc-port: 13345}}}\n")
    a0, a1 = one(rs, "agg", 0), one(rs, "agg", 1)
    assert _opt(a0, "--data-parallel-rpc-port") != _opt(a1, "--data-parallel-rpc-port")
    assert _opt(a0, "--data-parallel-rpc-port") == str(a0["ports"]["dp_rpc"])
    assert a0["argv"].count("--data-parallel-rpc-port") == 1


TRT = """\
name: tr
model: {path: /m, container: trt.sqsh}
resources: {gpus_per_node: 8}
frontend: {type: dynamo}
engine: {type: trtllm, served_model_name: served}
roles:
  prefill: {nodes: 1, workers: 1, gpus: 8, args: {tensor_parallel_size: 8, kv_cache_config: {free_gpu_memory_fraction: 0.5}}}
  decode: {nodes: 2, workers: 1, gpus: 16, args: {tensor_parallel_size: 16}}
"""


def test_trtllm_is_one_mpi_launch_per_endpoint_with_config_file():
    rs = rows(TRT)
    # one launch per endpoint, not per node; then etcd, and srtctl's Dynamo frontends with its
    # defaults (several, up to 1 + 9): one on each node other than the head
    assert [(r["role"], r["nodes"]) for r in rs] == [("svc-etcd", ["node1"]), ("prefill", ["node1"]),
                                                    ("decode", ["node2", "node3"])] + [
        ("frontend", [n]) for n in ["node2", "node3"]]
    d = one(rs, "decode")
    assert d["nodes"] == ["node2", "node3"] and d["ntasks"] == 16 and d["mpi"] == "pmix"
    # srtctl: Dynamo is installed first (0.8.0: the recipe names none), then the MPI ranks
    # become one engine under trtllm-llmapi-launch
    from reconciler.backends.dynamo_install import strip

    argv, script = strip(d["argv"])
    assert "ai-dynamo==0.8.0" in script and "ai-dynamo-runtime==0.8.0" in script
    assert argv == ["trtllm-llmapi-launch", "python3", "-m", "dynamo.trtllm", "--model-path", "/model",
                         "--served-model-name", "served", "--disaggregation-mode", "decode",
                         "--extra-engine-args", "/st/tr/configs/trtllm_decode.yaml", "--request-plane", "tcp",
                         "--publish-metrics"]
    assert d["srun_options"] == {"cpu-bind": "verbose,none", "kill-on-bad-exit": "1", "ntasks-per-node": "8",
                                 "oversubscribe": "", "container-mounts": "/m:/model,/st/tr/configs:/st/tr/configs",
                                 "no-container-mount-home": "", "no-container-entrypoint": ""}
    assert d["env"]["MASTER_ADDR"] == "node2" and d["env"]["MASTER_PORT"] == str(d["ports"]["master"])
    assert d["env"]["TRTLLM_EPLB_SHM_NAME"] == one(rows(yaml.safe_dump(yaml.safe_load(TRT))), "decode")["env"][
        "TRTLLM_EPLB_SHM_NAME"]  # stable: the same recipe renders the same spec
    assert d["container"] == "trt.sqsh"
    assert d["files"] == ["/st/tr/configs/trtllm_decode.yaml"]
    recipe = load_text(
        "name: tr\nmodel: {path: /m}\nengine: trtllm\nresources: {gpus_per_node: 8}\n"
        "roles: {agg: {nodes: 1, workers: 1, gpus: 8, args: {kv_cache_config: {free_gpu_memory_fraction: 0.5}}}}\n",
        "t.yaml",
    ).recipe
    (u,) = [u for u in render_units(recipe, None, STATE) if u.role == "agg"]
    assert yaml.safe_load(u.files["/st/tr/configs/trtllm_agg.yaml"]) == {
        "kv_cache_config": {"free_gpu_memory_fraction": 0.5}, "enable_iter_perf_stats": False}


@pytest.mark.parametrize("gpu,bind,mode,prefixed", [
    ("gb200", None, "decode", True), ("gb300", None, "prefill", True), ("vrnvl72", None, "decode", True),
    ("gb200", None, "agg", False), ("h100", None, "decode", False), ("GB200", None, "decode", False),
    ("gb200", False, "decode", False), ("h100", True, "agg", True),
])
def test_trtllm_numactl_on_two_numa_node_trays_as_srtctl(gpu, bind, mode, prefixed):
    roles = ("  agg: {nodes: 1, workers: 1, gpus: 4}\n" if mode == "agg" else
             "  prefill: {nodes: 1, workers: 1, gpus: 4}\n  decode: {nodes: 1, workers: 1, gpus: 4}\n")
    knob = "" if bind is None else f", numa_memory_bind: {str(bind).lower()}"
    rs = rows(f"name: n\nmodel: {{path: /m}}\nresources: {{gpus_per_node: 4, gpu_type: {gpu}}}\n"
              f"engine: {{type: trtllm{knob}}}\nroles:\n{roles}")
    argv = one(rs, mode)["argv"]
    assert (argv[:4] == ["numactl", "-m", "0,1", "trtllm-llmapi-launch"]) is prefixed
    assert argv[4 if prefixed else 1:][:3] == ["python3", "-m", "dynamo.trtllm"]


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
    assert a["argv"][:3] == ["trtllm-llmapi-launch", "trtllm-serve", "/m"]
    assert a["argv"][a["argv"].index("--config") + 1] == "/st/ts/configs/trtllm_agg.yaml"
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
    # srtctl names no mocker model: served as the recipe writes it (hf: is the source), the name
    # the router and a client ask for (desired/runtime.py default_served_name)
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
    assert a["argv"] == [
        "python3", "-m", "dynamo.mocker", "--model-path", "Org/Model", "--engine-type", "vllm",
        "--speedup-ratio", "50.0", "--data-parallel-size", "1", "--num-gpu-blocks-override", "512",
        "--max-num-seqs", "8", "--max-num-batched-tokens", "8192", "--no-enable-prefix-caching",
        "--crash-after", "30",
    ]  # srtctl: no --model-name, only non-default optional knobs
    assert a["health"].endswith(f":{a['ports']['system']}/health")
    assert a["env"]["DYN_SYSTEM_PORT"] == str(a["ports"]["system"])
    rs = rows(MOCKER % "dynamo")
    etcd, fe = one(rs, "svc-etcd"), one(rs, "frontend")
    # etcd (implied by the Dynamo frontend) first, fresh data dir, ports from the allocator
    c, p = etcd["ports"]["client"], etcd["ports"]["peer"]
    assert etcd["phase"] == "infra" and etcd["probe"] == "tcp" and etcd["health"] == f"http://node1:{c}/"
    assert etcd["argv"][:3] == ["/bin/sh", "-c", etcd["argv"][2]] and etcd["argv"][5] == "etcd"
    assert f"http://0.0.0.0:{c}" in etcd["argv"] and f"http://node1:{c}" in etcd["argv"]
    assert f"http://127.0.0.1:{p}" in etcd["argv"]
    # srtctl: python3 -m dynamo.frontend --http-port=P, the workers' discovery env
    assert fe["argv"] == ["python3", "-m", "dynamo.frontend", f"--http-port={fe['ports']['http']}"]
    for r in (a, fe):
        assert r["env"]["ETCD_ENDPOINTS"] == f"http://node1:{c}" and r["env"]["DYN_REQUEST_PLANE"] == "tcp"
        assert "NATS_SERVER" not in r["env"]  # 2.0: NATS only when a plane asks for it
    assert a["probe"] == "dynamo"


def test_mocker_prefill_behind_dynamo_gets_its_bootstrap_port():
    rs = rows(MOCKER.replace("agg: {workers: 2, gpus: 1, args: {num-gpu-blocks-override: 512, crash-after: 30}}",
                             "prefill: {workers: 1, gpus: 1}\n  decode: {workers: 1, gpus: 1}") % "dynamo")
    p, d = one(rs, "prefill"), one(rs, "decode")
    assert _opt(p, "--disaggregation-mode") == "prefill" and _opt(p, "--bootstrap-ports") == str(p["ports"]["bootstrap"])
    assert _opt(d, "--disaggregation-mode") == "decode" and "--bootstrap-ports" not in d["argv"]


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
        units = render_units(recipe, None, STATE)
        assert_renders_its_workers(recipe, units, f)
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
    r = run_render("examples/mocker-disagg.yaml", "--nodes", "gpu07")
    assert r.returncode == 0, r.stderr
    assert "prefill_0  nodes=gpu07" in r.stdout and "argv:" in r.stdout
    r = run_render("examples/mocker-disagg.yaml", "--nodes", "")
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


def test_a_local_model_is_mounted_at_slash_model_with_the_recipe_mounts_as_srtctl():
    rs = rows("name: mnt\nmodel: {path: /models/q, container: img.sqsh}\nresources: {gpus_per_node: 8}\n"
              "engine: sglang\ncontainer_mounts: {/data: /data}\nextra_mount: ['/scratch:/s']\n"
              "roles: {agg: {workers: 1, gpus: 1}}\n")
    a = one(rs, "agg")
    assert _opt(a, "--model-path") == "/model"
    assert a["srun_options"]["container-mounts"] == \
        "/models/q:/model,/st/mnt/configs:/st/mnt/configs,/data:/data,/scratch:/s"
    assert "no-container-mount-home" in a["srun_options"] and "no-container-entrypoint" in a["srun_options"]
    # no container (hf: or container_runtime none): nothing to mount, the path itself
    bare = one(rows("name: b\nmodel: {path: /models/q, container: img.sqsh}\nresources: {gpus_per_node: 8}\n"
                    "engine: sglang\nreconcile: {container_runtime: none, engine_python: /venv/bin/python}\n"
                    "roles: {agg: {workers: 1, gpus: 1, container: other.sqsh}}\n"), "agg")
    assert bare["container"] is None and "container-mounts" not in bare["srun_options"]
    assert bare["argv"][:2] == ["/venv/bin/python", "-m"] and _opt(bare, "--model-path") == "/models/q"


DYN = ("name: dy\nmodel: {path: /m, container: img.sqsh}\nresources: {gpus_per_node: 8}\nengine: sglang\n"
       "frontend: {type: dynamo}\nroles: {agg: {workers: 1, gpus: 1}}\n")


def test_dynamo_is_installed_into_the_container_as_srtctl_does_and_the_worker_argv_follows_verbatim():
    import subprocess

    from reconciler.backends.dynamo_install import strip

    a = one(rows(DYN + "dynamo: {version: '1.0.1'}\n"), "agg")
    argv, script = strip(a["argv"])
    assert argv[:3] == ["python3", "-m", "dynamo.sglang"]
    assert "ai-dynamo==1.0.1" in script and "pypi.nvidia.com" in script
    # the preamble hands the worker's argv to exec untouched (run it with a harmless stand-in)
    r = subprocess.run(["bash", "-c", script.replace("python3 -m pip", "true"), "dynamo-install", "printf",
                        "%s|", "a b", "$(x)"], capture_output=True, text=True, timeout=30)
    assert r.stdout == "a b|$(x)|"
    assert strip(one(rows(DYN + "dynamo: {install: false}\n"), "agg")["argv"])[1] is None
    # on the hosts (no container) the host's Dynamo is used
    host = one(rows(DYN + "reconcile: {container_runtime: none}\ndynamo: {version: '1.0.1'}\n"), "agg")
    assert strip(host["argv"])[1] is None


def test_a_dynamo_version_that_is_not_a_version_is_refused_and_source_builds_are_reported():
    with pytest.raises(RecipeError) as ei:
        load_text(DYN + "dynamo: {version: '1.0; rm -rf /'}\n", "t.yaml")
    assert ei.value.key == "dynamo.version"
    lr = load_text(DYN + "dynamo: {hash: abc123}\n", "t.yaml")
    assert "dynamo.hash" in lr.not_acted_on
    assert strip_none(lr)


def strip_none(lr):
    from reconciler.backends.dynamo_install import install_spec

    return install_spec(lr.recipe) is None


def test_review_fixes_vllm_and_mounts():
    with pytest.raises(RecipeError) as ei:
        load_text("name: v\nmodel: {path: /m}\nengine: vllm\nroles: {agg: {workers: 1, gpus: 1, "
                  "args: {tensor-parallel-size: two}}}\n", "t.yaml")
    assert ei.value.key == "roles.agg.args.tensor-parallel-size"
    # behind vllm-router with per-node DP every node serves its own API: each gets --host/--port
    r1 = one(rows(VLLM_DP % "vllm-router"), "agg", rank=1)
    assert _opt(r1, "--host") == "0.0.0.0" and "--port" in r1["argv"] and "--headless" not in r1["argv"]
    # the recipe's request plane is not passed twice
    a = one(rows(DYN.replace("engine: sglang", "engine: vllm").replace(
        "gpus: 1}", "gpus: 1, args: {request-plane: nats}}") + "dynamo: {install: false}\n"), "agg")
    assert a["argv"].count("--request-plane") == 1
    # a recipe's container-mounts srun option adds to /model and the config directory
    m = one(rows("name: mnt\nmodel: {path: /models/q, container: img.sqsh}\nresources: {gpus_per_node: 8}\n"
                 "engine: sglang\nsrun_options: {container-mounts: '/x:/x'}\nroles: {agg: {workers: 1, gpus: 1}}\n"),
            "agg")
    assert m["srun_options"]["container-mounts"] == "/models/q:/model,/st/mnt/configs:/st/mnt/configs,/x:/x"


def test_a_role_without_a_container_reads_the_model_from_its_host_path():
    rs = rows("name: mix\nmodel: {path: /models/q}\nresources: {gpus_per_node: 8}\nengine: sglang\n"
              "frontend: {type: sglang-router}\nroles:\n  prefill: {workers: 1, gpus: 1, container: img.sqsh}\n"
              "  decode: {workers: 1, gpus: 1}\n")
    p, d = one(rs, "prefill"), one(rs, "decode")
    assert _opt(p, "--model-path") == "/model" and "container-mounts" in p["srun_options"]
    assert _opt(d, "--model-path") == "/models/q" and d["container"] is None


@pytest.mark.parametrize("mem,numactl,flag", [(None, True, False), ("local", False, True), ("false", False, False)])
def test_trtllm_numa_cpu_bind_wraps_the_command_in_srtctls_script(tmp_path, mem, numactl, flag):
    """srtctl: bash /configs/numa_cpu_bind.sh [--bind-memory] <numactl> trtllm-llmapi-launch ...,
    TLLM_NUMA_AWARE_WORKER_AFFINITY=0; /configs is <srtctl_root>/configs."""
    from reconciler.recipe import cluster

    (tmp_path / "srtslurm.yaml").write_text("srtctl_root: /opt/srt\n")
    site = cluster.load(tmp_path / "srtslurm.yaml")
    knob = "" if mem is None else f", numa_memory_bind: {mem}"
    text = ("name: n\nmodel: {path: /m, container: /t.sqsh}\nresources: {gpus_per_node: 4, gpu_type: gb200}\n"
            "dynamo: {install: false}\n"
            f"engine: {{type: trtllm, numa_cpu_bind: true{knob}}}\n"
            "roles:\n  prefill: {nodes: 1, workers: 1, gpus: 4}\n  decode: {nodes: 1, workers: 1, gpus: 4}\n")
    loaded = load_text(text, "t.yaml", site, preflight=False)
    d = one(as_rows(render_units(loaded.recipe, None, STATE)), "decode")
    want = ["bash", "/configs/numa_cpu_bind.sh"] + (["--bind-memory"] if flag else []) + \
        (["numactl", "-m", "0,1"] if numactl else []) + ["trtllm-llmapi-launch"]
    assert d["argv"][: len(want)] == want and d["env"]["TLLM_NUMA_AWARE_WORKER_AFFINITY"] == "0"
    assert "/opt/srt/configs:/configs" in d["srun_options"]["container-mounts"]
    assert not any(k.startswith("engine.numa") for k in loaded.not_acted_on)
    bare = load_text(text, "t.yaml", None, preflight=False)  # no srtctl_root: no script to run, said so
    assert "srtctl_root" in bare.not_acted_on["engine.numa_cpu_bind"]
    assert one(as_rows(render_units(bare.recipe, None, STATE)), "decode")["argv"][0] != "bash"


def test_trtllm_local_memory_binding_needs_the_cpu_wrapper():
    with pytest.raises(RecipeError) as e:
        load_text("name: n\nmodel: {path: /m}\nengine: {type: trtllm, numa_memory_bind: local}\n"
                  "roles: {agg: {workers: 1, gpus: 4}}\n", "t.yaml")
    assert "numa_memory_bind: local requires numa_cpu_bind: true" in str(e.value) and e.value.key.startswith("engine")


def test_sglang_kv_events_publish_on_their_own_port_as_srtctl():
    """srtctl: a role with kv_events gets --kv-events-config {publisher: zmq, topic: kv-events, endpoint:
    tcp://*:<port>} (behind any frontend); v1's global kv_events_config: true means prefill and decode."""
    rs = rows((SGLANG_DISAGG % "sglang-router").replace("prefill: {", "prefill: {kv_events: {topic: t}, "))
    p, d = one(rs, "prefill"), one(rs, "decode")
    assert json.loads(_opt(p, "--kv-events-config")) == {
        "publisher": "zmq", "topic": "t", "endpoint": f"tcp://*:{p['ports']['kv_events']}"}
    assert "--kv-events-config" not in d["argv"] and "kv_events" not in d["ports"]
    assert "--dump-config-to" not in p["argv"]  # srtctl dumps the config of dynamo.sglang only
    v1 = load_text("name: v1kv\nmodel: {path: /m, container: c}\nresources: {gpu_type: h100, prefill_nodes: 1, "
                   "decode_nodes: 1, prefill_workers: 1, decode_workers: 1, gpus_per_node: 4}\n"
                   "backend: {type: sglang, kv_events_config: true}\n", "v1.yaml")
    assert v1.recipe.roles["prefill"].kv_events is True and v1.recipe.roles["decode"].kv_events is True
    assert not any("kv_events" in k for k in v1.not_acted_on)
