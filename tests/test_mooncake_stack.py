"""The real Mooncake master on the real Slurm, in front of mocker workers.

``mooncake_master`` is the PyPI build (mooncake-transfer-engine-non-cuda, in .stacks/mooncake,
installed by scripts/stacks-install.sh); the workers are the project's mocker (the engines
that would talk to the store need GPUs). Every check reads the processes themselves:
their command lines, start times and environments from /proc, the master's own /health.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from helpers import get, wait_until
from harness import Harness, scancel
from support.recipes import PARKED
from support.stacks import environ, started

ROOT = Path(__file__).resolve().parents[1]
MOONCAKE_BIN = ROOT / ".stacks" / "mooncake" / "bin"
pytestmark = pytest.mark.slurm

RECIPE = """\
name: {name}
model: {{path: m}}
resources: {{gpus_per_node: 8}}
engine:
  type: mocker
  speedup_ratio: 100
  mooncake_kv_store: {{env: {{MOONCAKE_PROTOCOL: tcp, MOONCAKE_GLOBAL_SEGMENT_SIZE: 1gb}}}}
roles: {{agg: {{workers: 2, gpus: 1}}}}
frontend: {{type: builtin}}
"""


def procs(*needles: str) -> list[int]:
    """pids whose argv contains every one of ``needles``."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        # the srun client and the step's wrappers carry the same argv after their own
        words = {*argv, *(Path(a).name for a in argv)}  # a program may run as a full path
        if all(n in words for n in needles) and Path(argv[0]).name not in ("srun", "sh", "bash", "env"):
            out.append(int(pid))
    return out


def health(port: int) -> bool:
    try:
        status, body = get(f"http://127.0.0.1:{port}/health", timeout=3)
    except OSError:
        return False
    return status == 200 and json.loads(body).get("service_ready") is True


def test_the_real_mooncake_master_starts_first_is_relaunched_and_wires_the_workers(tmp_path):
    if not (MOONCAKE_BIN / "mooncake_master").exists():
        pytest.fail("mooncake_master is not installed: run scripts/stacks-install.sh")
    h = Harness(tmp_path, "slurm")
    # steps inherit the reconciler's PATH: mooncake_master from .stacks, the mocker from this Python
    h.env["PATH"] = f"{MOONCAKE_BIN}:{h.env['PATH']}"
    (tmp_path / "srtslurm.yaml").write_text(json.dumps({"host_runtime": {"python": sys.executable}}))
    try:
        name = h.name("mooncake")
        (h.manifests / "parked.yaml").write_text(PARKED)
        (h.manifests / f"{name}.yaml").write_text(RECIPE.format(name=name))
        h.start()
        h.wait_ready(name, timeout=90)
        steps = h.wait_steps(name, {"svc-mooncake-master_0", "agg_0", "agg_1", "frontend_0"})
        node = steps["agg_0"][1]
        st = json.loads((h.state / name / "status.json").read_text())
        ports = {f"{w['role']}_{w['index']}": w["ports"] for w in st["workers"]}
        mp = ports["svc-mooncake-master_0"]
        assert health(mp["metrics"]), "the master's admin server answers /health"
        (master,) = procs("mooncake_master", f"--port={mp['rpc']}", f"--metrics_port={mp['metrics']}")

        for w in ("agg_0", "agg_1"):
            (pid,) = procs("reconciler.mocker", "--port", str(ports[w]["http"]))
            env = environ(pid)
            assert env["MOONCAKE_MASTER"] == f"{node}:{mp['rpc']}"
            assert env["MOONCAKE_TE_META_DATA_SERVER"] == f"http://{node}:{mp['metadata']}/metadata"
            assert env["MOONCAKE_LOCAL_HOSTNAME"] == node
            assert env["MOONCAKE_PROTOCOL"] == "tcp" and env["MOONCAKE_GLOBAL_SEGMENT_SIZE"] == "1gb"
            # gated on the master's readiness: each worker process started after the master's
            assert started(pid) > started(master), (w, started(pid), started(master))

        # kill the master: relaunched on its ports; the workers registered with the old one read
        # MOONCAKE_MASTER, so they get new lives once it is Ready (issue 27's dependency-aware
        # restarts), on purpose: not counted as restarts; then all Ready again
        workers_before = {u: steps[u][0] for u in ("agg_0", "agg_1")}
        scancel(steps["svc-mooncake-master_0"][0])
        wait_until(lambda: (s := h.steps(name).get("svc-mooncake-master_0")) and
                   s[0] != steps["svc-mooncake-master_0"][0], timeout=60, what="the master relaunched")
        wait_until(lambda: all((s := h.steps(name).get(u)) and s[0] != workers_before[u] for u in workers_before),
                   timeout=60, what=f"the workers relaunched for the master's new life (log:\n{h.log()[-3000:]})")
        wait_until(lambda: health(mp["metrics"]) and h.get(name)["status"] == "Ready", timeout=90,
                   what=f"the master and its workers Ready again (log:\n{h.log()[-3000:]})")
        (again,) = procs("mooncake_master", f"--port={mp['rpc']}")
        assert again != master
        st = json.loads((h.state / name / "status.json").read_text())
        restarts = {f"{w['role']}_{w['index']}": w.get("restarts", 0) for w in st["workers"]}
        assert restarts["agg_0"] == restarts["agg_1"] == 0, restarts  # a dependency's new life is no restart
        for w in ("agg_0", "agg_1"):  # the new lives read the same master address
            (pid,) = procs("reconciler.mocker", "--port", str(ports[w]["http"]))
            assert environ(pid)["MOONCAKE_MASTER"] == f"{node}:{mp['rpc']}"
            assert started(pid) > started(again)
    finally:
        h.cleanup()
