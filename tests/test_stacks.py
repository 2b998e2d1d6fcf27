"""Real serving stacks on the real Slurm: etcd, NATS, dynamo.frontend and dynamo.mocker.

The corpus's own srtctl mocker recipes are copied unmodified; a cluster config beside them
(host mode, no containers) aliases their model to a tiny tokenizer directory and their
container to nothing. Every program is the real one (Debian's etcd and nats-server, NVIDIA
Dynamo 1.6.1 from .stacks/dynamo, installed by scripts/stacks-install.sh).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import get, wait_until
from reconciler.shell.readiness import canary
from harness import Harness, scancel
from support.clients import chat, served, instances, serves
from support.recipes import PARKED
from support.stacks import stack, copy_recipe, start_times, stack_tools, tiny_model  # noqa: F401 - fixtures among them

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slurm


@pytest.mark.parametrize("rel,services", [
    ("srt-slurm-v1/mocker/agg.yaml", ["svc-etcd_0", "svc-nats_0"]),  # request_plane: nats implies NATS
    ("srt-slurm-v2/mocker/dynamo-agg.yaml", ["svc-etcd_0"]),  # srtctl 2.0: a plain Dynamo job runs etcd only
], ids=["v1-agg", "v2-dynamo-agg"])
def test_srtctl_mocker_recipe_runs_the_real_dynamo_stack(stack, corpus, rel, services):
    h = stack
    name, f = copy_recipe(h, corpus, rel)
    r = subprocess.run([sys.executable, "-m", "reconciler.cli", "validate", str(f)], capture_output=True, text=True,
                       timeout=60, cwd=h.tmp)
    assert r.returncode == 0, r.stdout + r.stderr
    h.start()
    h.wait_steps(name, {*services, "agg_0", "frontend_0"}, timeout=90)
    g = h.wait_ready(name, timeout=90)
    starts = start_times(h, name)
    # services first, then the worker, then the frontend (after a Ready worker)
    assert max(starts[s] for s in services) <= starts["agg_0"] <= starts["frontend_0"], starts
    endpoint = g["endpoint"]
    model = wait_until(lambda: served(endpoint), timeout=30, what="the frontend to list the model")
    status, body = wait_until(lambda: (r := chat(endpoint, model))[0] == 200 and r, timeout=30,
                              what="a chat completion through dynamo.frontend")
    assert json.loads(body)["usage"]["completion_tokens"] == 8
    r = subprocess.run([sys.executable, "-m", "reconciler.cli", "render", "-o", "json", str(f)], capture_output=True,
                       text=True, timeout=60, cwd=h.tmp)
    env = json.loads(r.stdout)["processes"][-1]["env"]
    assert ("NATS_SERVER" in env) == ("svc-nats_0" in services)

    # workers 1 -> 2: the frontend sees two instances
    f.write_text(f.read_text().replace("agg_workers: 1", "agg_workers: 2"))
    h.wait_steps(name, {*services, "agg_0", "agg_1", "frontend_0"}, timeout=60)
    # Ready first: the edit also rolls agg_0 (its GPUs go from 4 to 2: the node is shared out), and its surge
    # life made 2 instances while agg_1 was still launching; a scancel of a step Slurm has not
    # finished launching ("aborted before step completely launched") left its worker running and
    # the step listed for over a minute (2026-12-07 17:51, v1-agg): no relaunch to see
    h.wait_ready(name, timeout=90)
    wait_until(lambda: instances(endpoint) == 2, timeout=60, what="the frontend to list 2 instances")

    # scancel a worker: relaunched, and requests succeed again
    victim = h.steps(name)["agg_1"]
    scancel(victim[0])
    wait_until(lambda: (s := h.steps(name).get("agg_1")) and s[0] != victim[0], timeout=60,
               what="agg_1 relaunched")
    wait_until(lambda: serves(endpoint, model), timeout=60, what="requests to succeed after the worker kill")

    # scancel etcd: relaunched, and the stack serves again within a bounded wait
    etcd = h.steps(name)["svc-etcd_0"]
    scancel(etcd[0])
    wait_until(lambda: (s := h.steps(name).get("svc-etcd_0")) and s[0] != etcd[0], timeout=60,
               what="etcd relaunched")
    wait_until(lambda: h.get(name)["status"] == "Ready" and serves(endpoint, model), timeout=120,
               what=f"the stack to serve again after etcd was killed (log:\n{h.log()[-3000:]})")

    # delete the file: nothing of ours is left
    f.unlink()
    wait_until(lambda: not h.steps(name) and not h.jobs(name), timeout=60, what="everything gone")


def test_file_discovery_runs_no_etcd_or_nats(stack, corpus):
    h = stack
    h.config("file")
    name, f = copy_recipe(h, corpus, "srt-slurm-v2/mocker/dynamo-agg.yaml")
    h.start()
    g = h.wait_ready(name, timeout=90)
    assert set(h.steps(name)) == {"agg_0", "frontend_0"}
    model = wait_until(lambda: served(g["endpoint"]), timeout=30, what="the model listed")
    assert wait_until(lambda: serves(g["endpoint"], model), timeout=30, what="a chat completion")


def test_network_interface_workers_learn_the_head_ip_at_launch_and_serve(stack, corpus, nic):
    """srtctl passes HEAD_NODE_IP as the head's IP on network_interface: the worker's step goes
    through the address script (reconciler.desired.netaddr), publishes its node's IP and starts dynamo.mocker
    with it; the stack serves as without."""
    iface, ip = nic  # as root its own veth: the address is one nothing else on the host has
    h = stack
    h.config(network_interface=f"nosuch0,{iface}")
    name, f = copy_recipe(h, corpus, "srt-slurm-v2/mocker/dynamo-agg.yaml")
    h.start()
    g = h.wait_ready(name, timeout=90)
    model = wait_until(lambda: served(g["endpoint"]), timeout=30, what="the model listed")
    assert wait_until(lambda: serves(g["endpoint"], model), timeout=30, what="a chat completion")
    published = sorted((h.state / name / "configs" / "addr").iterdir())  # one node: its own file
    assert [p.read_text() for p in published] == [ip + "\n"], published

    def environ_has_ip() -> bool:  # the running dynamo.mocker got the substituted value
        for pid in subprocess.run(["pgrep", "-f", "dynamo.mocker"], capture_output=True, text=True).stdout.split():
            try:
                env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if f"HEAD_NODE_IP={ip}".encode() in env and any(e.startswith(b"ETCD_ENDPOINTS=") for e in env):
                return True
        return False

    wait_until(environ_has_ip, timeout=30, what="a dynamo.mocker with HEAD_NODE_IP set to the interface's IP")


ROUTED = """\
name: {name}
model: {{path: m}}
resources: {{gpus_per_node: 8}}
engine: {{type: mocker, speedup_ratio: 100}}
roles: {{agg: {{workers: {workers}, gpus: 1, restart: {{backoff_seconds: 0.5}}}}}}
frontend: {{type: {router}, args: {{policy: round_robin}}}}
"""


def router_url(h: Harness, name: str) -> str | None:
    """The router's own address (the frontend's URL in status.json). Its admin API (``/workers``)
    is not the gateway's to pass on: the front door answers only OpenAI paths and ``/health``."""
    st = json.loads((h.state / name / "status.json").read_text())
    return next((w["url"] for w in st["workers"] if w["role"] == "frontend" and w.get("url")), None)


def router_workers(router: str | None) -> set[str] | None:
    if router is None:
        return None
    try:
        status, body = get(router + "/workers", timeout=3)
    except OSError:
        return None
    return {w["url"] for w in json.loads(body)["workers"] if w.get("is_healthy")} if status == 200 else None


@pytest.mark.parametrize("router", ["sglang-router", "vllm-router"])
def test_a_router_follows_readiness(tmp_path, router):
    if not shutil.which(router, path=str(Path(sys.executable).parent)):
        pytest.fail(f"{router} is not installed: run scripts/stacks-install.sh")
    h = Harness(tmp_path, "slurm")
    # the router and the built-in mocker both run from the project's Python
    (tmp_path / "srtslurm.yaml").write_text(json.dumps({"host_runtime": {"python": sys.executable}}))
    try:
        name = h.name("routed")
        (h.manifests / "parked.yaml").write_text(PARKED)
        f = h.manifests / f"{name}.yaml"
        f.write_text(ROUTED.format(name=name, workers=1, router=router))
        h.start()
        g = h.wait_ready(name, timeout=60)
        endpoint = g["endpoint"]

        def urls() -> set[str]:  # the Ready workers, as the reconciler's status says
            st = json.loads((h.state / name / "status.json").read_text())
            return {w["url"] for w in st["workers"] if w["role"] == "agg" and w["ready"]}

        wait_until(lambda: router_workers(router_url(h, name)) == urls() and len(urls()) == 1, timeout=30,
                   what="the router to list the Ready worker")
        assert wait_until(lambda: chat(endpoint, "m")[0] == 200, timeout=20, what="a completion via the router")
        assert served(endpoint) == "m"  # the router learnt the model from the worker's /get_model_info

        f.write_text(ROUTED.format(name=name, workers=2, router=router))
        wait_until(lambda: len(urls()) == 2 and router_workers(router_url(h, name)) == urls(), timeout=60,
                   what="the router to list both workers")

        victim = h.steps(name)["agg_1"]
        scancel(victim[0])
        wait_until(lambda: (s := h.steps(name).get("agg_1")) and s[0] != victim[0], timeout=60, what="agg_1 back")
        wait_until(lambda: len(urls()) == 2 and router_workers(router_url(h, name)) == urls(), timeout=60,
                   what="the router to list the relaunched worker again")
        # after the bounded wait, no request fails: each of them reaches a Ready worker
        results = [chat(endpoint, "m")[0] for _ in range(20)]
        assert results == [200] * 20, results
    finally:
        h.cleanup()


ROUTED_PD = """\
name: {name}
model: {{path: m}}
resources: {{gpus_per_node: 8}}
engine: {{type: mocker, speedup_ratio: 100}}
roles:
  prefill: {{workers: {prefill}, gpus: 1, restart: {{backoff_seconds: 0.5}}}}
  decode: {{nodes: colocate, workers: {decode}, gpus: 1, restart: {{backoff_seconds: 0.5}}}}
frontend: {{type: sglang-router}}
"""


def pd_workers(router: str | None) -> dict[str, set[str]] | None:
    """worker type -> the healthy workers' URLs, as the router lists them."""
    if router is None:
        return None
    try:
        status, body = get(router + "/workers", timeout=3)
    except OSError:
        return None
    if status != 200:
        return None
    out: dict[str, set[str]] = {"prefill": set(), "decode": set()}
    for w in json.loads(body)["workers"]:
        if w.get("is_healthy"):
            out.setdefault(w.get("worker_type", "?"), set()).add(w["url"])
    return out


def finished(url: str) -> float:
    """Requests a built-in mocker finished (its vLLM-named Prometheus counter)."""
    status, body = get(url + "/metrics", timeout=5)
    assert status == 200
    return sum(float(line.rsplit(" ", 1)[1]) for line in body.decode().splitlines()
               if line.startswith("vllm:request_success_total"))


def test_the_sglang_router_in_prefill_decode_mode_follows_readiness(tmp_path):
    if not shutil.which("sglang-router", path=str(Path(sys.executable).parent)):
        pytest.fail("sglang-router is not installed: run scripts/stacks-install.sh")
    h = Harness(tmp_path, "slurm")
    (tmp_path / "srtslurm.yaml").write_text(json.dumps({"host_runtime": {"python": sys.executable}}))
    try:
        name = h.name("pd")
        (h.manifests / "parked.yaml").write_text(PARKED)
        f = h.manifests / f"{name}.yaml"
        f.write_text(ROUTED_PD.format(name=name, prefill=1, decode=1))
        h.start()
        endpoint = h.wait_ready(name, timeout=60)["endpoint"]

        def urls() -> dict[str, set[str]]:  # the Ready workers per role, as the reconciler's status says
            st = json.loads((h.state / name / "status.json").read_text())
            out: dict[str, set[str]] = {"prefill": set(), "decode": set()}
            for w in st["workers"]:
                if w["role"] in out and w["ready"]:
                    out[w["role"]].add(w["url"])
            return out

        def listed(n_prefill: int, n_decode: int) -> bool:
            u = urls()
            return (len(u["prefill"]), len(u["decode"])) == (n_prefill, n_decode) and pd_workers(router_url(h, name)) == u

        wait_until(lambda: listed(1, 1), timeout=30, what=f"the router to list one prefill and one decode worker "
                                                           f"(router: {pd_workers(router_url(h, name))}, Ready: {urls()})")
        assert wait_until(lambda: chat(endpoint, "m")[0] == 200, timeout=20, what="a completion via the PD router")

        f.write_text(ROUTED_PD.format(name=name, prefill=2, decode=2))
        wait_until(lambda: listed(2, 2), timeout=60, what="the router to list two workers of each kind")

        for unit in ("prefill_1", "decode_1"):
            victim = h.steps(name)[unit]
            scancel(victim[0])
            wait_until(lambda: (s := h.steps(name).get(unit)) and s[0] != victim[0], timeout=60, what=f"{unit} back")
        wait_until(lambda: listed(2, 2), timeout=60, what="the router to list the relaunched workers again")
        # after the bounded wait, no request fails: each pair reaches Ready workers
        results = [chat(endpoint, "m")[0] for _ in range(20)]
        assert results == [200] * 20, results

        f.write_text(ROUTED_PD.format(name=name, prefill=1, decode=1))
        wait_until(lambda: listed(1, 1), timeout=60, what="the router to drop the scaled-down workers")
        u = urls()
        start = time.monotonic()
        before = {role: finished(next(iter(u[role]))) for role in u}
        results = [chat(endpoint, "m")[0] for _ in range(10)]
        assert results == [200] * 10, results
        # each request went to both halves: SGLang's PD protocol, not plain load balancing (5 and
        # 5). The frontend's readiness canary goes through the router too: one in flight when
        # `before` was read may be counted after it by one half (seen: prefill 11, decode 10), and
        # more may come meanwhile
        got = {role: finished(next(iter(u[role]))) - before[role] for role in u}
        canaries = 2 + (time.monotonic() - start) / canary.CANARY_INTERVAL
        assert all(10 <= n <= 10 + canaries for n in got.values()), (got, canaries)
    finally:
        h.cleanup()


def test_a_dedicated_node_holds_etcd_and_no_worker(stack, corpus):
    h = stack
    name, f = copy_recipe(h, corpus, "srt-slurm-v2/mocker/dynamo-agg.yaml")
    # one node per allocation: the dedicated node is an allocation of its own (on this one-node Slurm,
    # both land on the same machine, but Slurm holds them apart)
    f.write_text(f.read_text() + "services:\n  - {name: etcd, type: etcd, placement: {node: dedicated}}\n"
                 "reconcile: {nodes_per_allocation: 1}\n")
    h.start()
    g = h.wait_ready(name, timeout=90)
    steps = h.steps(name)
    assert set(steps) == {"svc-etcd_0", "agg_0", "frontend_0"}
    job = {unit: sid.split(".")[0] for unit, (sid, _) in steps.items()}
    assert len(h.jobs(name)) == 2 and job["svc-etcd_0"] != job["agg_0"] == job["frontend_0"]
    model = wait_until(lambda: served(g["endpoint"]), timeout=30, what="the model listed")
    assert wait_until(lambda: serves(g["endpoint"], model), timeout=30, what="a chat completion")


def test_a_kv_router_dynamo_recipe_serves_without_nats(stack, corpus):
    """Issue 33: srtctl starts NATS for a Dynamo job only when a plane rides on it
    (src/srtctl/services/implicit.py nats_implied_reasons, since NVIDIA/srt-slurm PR #439 'imply
    NATS only when a Dynamo plane uses it', 2026-09-14; before it NATS was always started), and so
    do we. The case the issue doubted: `--router-mode kv` on the default tcp request plane. Dynamo
    1.6.1 publishes KV events over ZMQ unless DYN_EVENT_PLANE=nats, so the KV router needs no NATS:
    the real stack, two workers behind a KV-routing frontend, etcd and no NATS, serves."""
    h = stack
    name, f = copy_recipe(h, corpus, "srt-slurm-v2/mocker/dynamo-agg.yaml")
    text = f.read_text().replace("agg_workers: 1", "agg_workers: 2")
    text = text.replace("  enable_multiple_frontends: false\n",
                        "  enable_multiple_frontends: false\n  args:\n    router-mode: kv\n")
    assert "router-mode: kv" in text
    f.write_text(text)
    r = subprocess.run([sys.executable, "-m", "reconciler.cli", "render", "-o", "json", str(f)], capture_output=True,
                       text=True, timeout=60, cwd=h.tmp)
    procs = json.loads(r.stdout)["processes"]
    fe = next(p for p in procs if p["role"] == "frontend")
    assert "--router-mode" in fe["argv"] and "kv" in fe["argv"], fe["argv"]
    assert not any("NATS_SERVER" in p["env"] for p in procs)
    h.start()
    h.wait_steps(name, {"svc-etcd_0", "agg_0", "agg_1", "frontend_0"}, timeout=90)
    g = h.wait_ready(name, timeout=90)
    assert set(h.steps(name)) == {"svc-etcd_0", "agg_0", "agg_1", "frontend_0"}  # no svc-nats_0
    endpoint = g["endpoint"]
    model = wait_until(lambda: served(endpoint), timeout=30, what="the frontend to list the model")
    wait_until(lambda: instances(endpoint) == 2, timeout=60, what="the frontend to list 2 instances")
    for _ in range(10):  # the same prompt again and again: the KV router routes on what it has seen
        status, body = chat(endpoint, model)
        assert status == 200, body[:300]
    log = (h.state / name / "logs" / "frontend_0.0.log").read_text(errors="replace")
    assert "direct-ZMQ KV event ingress" in log, log[-2000:]  # the KV router is on, fed over ZMQ
    assert "requires NATS" not in log and "NATS" not in log.upper().replace("NATS_", ""), log[-2000:]
