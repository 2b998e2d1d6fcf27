"""Shadow-engine recovery on the real Slurm: the gms service per worker, engines as units.

The real engines (``dynamo.vllm`` with ``--load-format gms``) and GPU Memory Service need
GPUs. What stands in: ``dynamo.mocker`` (Dynamo 1.6.1's own GPU-less engine, from
.stacks/dynamo) as every engine, behind the real ``dynamo.frontend`` and etcd, through the
mocker's ``failover`` knob (the same layout a vLLM failover recipe gets); and
tests/standins/gms_server.py as the per-device GMS server, under the reconciler's real
supervisor script. Every check reads Slurm (squeue) or the processes themselves (/proc).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from helpers import wait_until
from harness import scancel
from support.stacks import environ, stack, stack_tools, start_times, started, tiny_model  # noqa: F401 - fixtures among them
from support.recipes import PARKED

STANDIN = Path(__file__).resolve().parent / "standins" / "gms_server.py"
pytestmark = pytest.mark.slurm

RECIPE = """\
name: {name}
model: {{path: qwen3-0.6b}}
resources: {{gpus_per_node: 8}}
frontend: {{type: dynamo}}
engine:
  type: mocker
  engine_type: vllm
  speedup_ratio: 100
  failover: {{shadow_engines: 1, shared_dir: {shared}}}
roles:
  agg:
    workers: 2
    gpus: 2
    restart: {{policy: always, backoff_seconds: 1}}
services:
  - name: gms
    type: gms
    command: [{python}, {standin}]
    readiness: {{timeout_seconds: 60}}
  - name: mon
    type: generic
    start: with_workers
    command: [{python}, -c, "import os, time; print('mon {{worker_role}}_{{worker_index}} gpus {{worker_gpus}} mask', os.environ['CUDA_VISIBLE_DEVICES'], flush=True); time.sleep(1e9)"]
    placement: {{node: agg, per: worker}}
    readiness: {{log: {{pattern: "^mon agg_"}}}}
"""
ENGINES = ("agg_0", "agg-e1_0", "agg_1", "agg-e1_1")
GMS = ("svc-gms-agg_0", "svc-gms-agg_1")
MON = ("svc-mon-agg_0", "svc-mon-agg_1")  # a generic per-worker service


def engine_pids(system_ports: dict[str, int]) -> dict[str, int]:
    """unit -> pid of its dynamo.mocker, found by the DYN_SYSTEM_PORT in its environment."""
    out = {}
    by_port = {str(p): u for u, p in system_ports.items()}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if b"dynamo.mocker" not in argv or Path(argv[0].decode()).name in ("srun", "sh", "bash", "env"):
                continue
            unit = by_port.get(environ(int(pid)).get("DYN_SYSTEM_PORT", ""))
        except OSError:
            continue
        if unit:
            out[unit] = int(pid)
    return out


def standin_pids() -> list[int]:
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        if str(STANDIN) in argv and Path(argv[0]).name not in ("srun", "sh", "bash", "env"):
            out.append(int(pid))
    return out


def test_failover_runs_gms_first_and_relaunches_one_engine_alone(stack, tmp_path):
    h = stack
    # a short directory: a Unix socket's path has at most 107 bytes (pytest's tmp_path is long)
    shared = Path(tempfile.mkdtemp(prefix="fo", dir="/tmp"))
    name = h.name("failover")
    (h.manifests / "parked.yaml").write_text(PARKED)
    (h.manifests / f"{name}.yaml").write_text(RECIPE.format(name=name, shared=shared, python=sys.executable,
                                                            standin=STANDIN))
    h.start()
    steps = h.wait_steps(name, {"svc-etcd_0", *GMS, *MON, *ENGINES, "frontend_0"}, timeout=300)
    h.wait_ready(name, timeout=120)
    steps = h.steps(name)
    job = steps["agg_0"][0].split(".")[0]

    # order, as Slurm saw it: each gms instance started before its worker's engines
    starts = start_times(h, name)
    for i in (0, 1):
        assert starts[f"svc-gms-agg_{i}"] < min(starts[f"agg_{i}"], starts[f"agg-e1_{i}"], starts[f"svc-mon-agg_{i}"]), \
            starts

    # the gms instance bound its sockets in the worker's directory, in the worker's device view
    st = json.loads((h.state / name / "status.json").read_text())
    ports = {f"{w['role']}_{w['index']}": w["ports"] for w in st["workers"]}
    pids = wait_until(lambda: (p := engine_pids({u: ports[u]["system"] for u in ENGINES})) and len(p) == 4 and p,
                      timeout=30, what="four dynamo.mocker engines")
    # the job's GPUs as Slurm numbers them on the node: a worker's logical GPU k is the k-th
    # (drivers/base.LAUNCHER; the test Slurm does not confine devices, so they are global indices)
    held = environ(pids["agg_0"])["SLURM_STEP_GPUS"].split(",")

    def on_job(logical: str) -> str:
        return ",".join(held[int(k)] for k in logical.split(","))

    for i, gpus in ((0, "0,1"), (1, "2,3")):
        directory = shared / f"rcl-{job}" / f"agg_{i}"
        socks = sorted(p.name for p in directory.glob("gms_*.sock"))
        assert len(socks) == 4, socks  # two devices x (weights, kv_cache)
        for k, unit in enumerate((f"agg_{i}", f"agg-e1_{i}")):
            env = environ(pids[unit])
            assert env["ENGINE_ID"] == str(k)
            assert env["GMS_SOCKET_DIR"] == str(directory)
            assert env["FAILOVER_LOCK_PATH"] == str(directory / "failover.lock")
            assert env["CUDA_VISIBLE_DEVICES"] == on_job(gpus)
            assert env["DYN_VLLM_GMS_SHADOW_MODE"] == "true"
    servers = {environ(p)["CUDA_VISIBLE_DEVICES"] for p in standin_pids()}
    assert servers == {on_job("0,1"), on_job("2,3")}, "each gms instance runs in its worker's device view"
    gms_started = {environ(p)["GMS_SOCKET_DIR"]: started(p) for p in standin_pids()}
    for i in (0, 1):
        first = gms_started[str(shared / f"rcl-{job}" / f"agg_{i}")]
        assert all(started(pids[u]) > first for u in (f"agg_{i}", f"agg-e1_{i}"))
    assert len({ports[u]["system"] for u in ENGINES}) == 4, "every engine has its own ports"
    # the generic per-worker service: its worker's placeholders and device view
    for i, gpus in ((0, "0,1"), (1, "2,3")):
        log = (h.state / name / "logs" / f"svc-mon-agg_{i}.0.log").read_text()
        assert f"mon agg_{i} gpus {gpus} mask {on_job(gpus)}" in log, log

    # kill one shadow engine's step: it alone is relaunched; its siblings and the gms keep their steps
    before = {u: s[0] for u, s in steps.items()}
    scancel(before["agg-e1_0"])
    wait_until(lambda: (s := h.steps(name).get("agg-e1_0")) and s[0] != before["agg-e1_0"], timeout=60,
               what=f"agg-e1_0 relaunched (log:\n{h.log()[-3000:]})")
    h.wait_ready(name, timeout=60)
    after = {u: s[0] for u, s in h.steps(name).items()}
    assert {u: v for u, v in after.items() if u != "agg-e1_0"} == \
        {u: v for u, v in before.items() if u != "agg-e1_0"}, (before, after)
    again = wait_until(lambda: engine_pids({"agg-e1_0": ports["agg-e1_0"]["system"]}).get("agg-e1_0"),
                       timeout=30, what="the relaunched engine's process")
    assert again != pids["agg-e1_0"] and environ(again)["ENGINE_ID"] == "1"
    st = json.loads((h.state / name / "status.json").read_text())
    restarts = {f"{w['role']}_{w['index']}": w.get("restarts") for w in st["workers"]}
    assert restarts["agg-e1_0"] == 1 and restarts["agg_0"] == 0, restarts

    # delete the recipe: everything goes (scancel of a step is a SIGKILL: the directory stays, docs/backends.md)
    (h.manifests / f"{name}.yaml").unlink()
    wait_until(lambda: not h.steps(name) and not h.jobs(name), timeout=90, what="everything gone")
    shutil.rmtree(shared)
