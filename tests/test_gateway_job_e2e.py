"""The gateway in its own small Slurm job (reconcile.gateway.allocation): its address is the named
node's and never changes — across a frontend relaunch (held beside nginx on the node), a config
change (a reload through ``scancel --batch --signal=HUP``), a restart of the reconciler, the gateway
job itself cancelled (a new job on the same node, the same port) — and deleting the recipe ends
the job (on the local Slurm, whose one node is this host). On the 3-node Slurm: another node moves
it, and the old job is never taken for the new one's."""

from __future__ import annotations

import json
import socket
import subprocess

import pytest

from harness import scancel
from helpers import get, wait_until
from reconciler import labels
from reconciler.gateway import GatewayConfig, version
from reconciler.shell.gateway.record import facts, prefix_of
from support.gateways import _only_frontend_killed, _serves
from support.clusters import mn, slurm_h  # noqa: F401 - the fixtures mn (the 3-node Slurm) and h
from support.record import events

pytestmark = pytest.mark.needs("nginx")

NODE = socket.gethostname()  # the local Slurm's one node (scripts/slurm-dev.sh names it so)
RECIPE = """\
schema: 2
name: {name}
model: {{path: m}}
resources: {{gpus_per_node: 4}}
engine: {{type: mocker, speedup_ratio: 100}}
roles: {{agg: {{workers: 1, gpus: 1}}}}
frontend: {{type: builtin, args: {{poll-interval: 0.25}}}}
reconcile: {{gateway: {{hold_seconds: 60, allocation: {{node: {node}}}}}}}
"""


def _gateway_jobs(h, name: str) -> list[tuple[str, str, str]]:
    """(job id, state, node) of the recipe's gateway jobs, as squeue lists them."""
    job = labels.gateway_job_name(h.owner, name)
    out = subprocess.run(["squeue", "-h", f"--name={job}", "-o", "%i %T %N"], capture_output=True, text=True,
                         timeout=30, check=True).stdout
    return [tuple(line.split()) for line in out.splitlines() if line.strip()]


@pytest.mark.slurm
def test_a_gateway_in_its_own_job_keeps_its_address(h):
    name = h.name("gwjob")
    (h.manifests / f"{name}.yaml").write_text(RECIPE.format(name=name, node=NODE))
    h.start()
    h.wait_steps(name, {"agg_0", "frontend_0"})
    endpoint = h.wait_ready(name, timeout=120)["endpoint"]
    gw = json.loads((h.state / name / "gateway.json").read_text())
    assert gw["mode"] == "job" and endpoint == f"http://{NODE}:{gw['port']}", (endpoint, gw)
    [(job, state, node)] = _gateway_jobs(h, name)
    assert (state, node) == ("RUNNING", NODE)
    # a CPU-only job: the GPUs of its node stay the workers'
    shown = subprocess.run(["scontrol", "show", "job", "-o", job], capture_output=True, text=True, timeout=30).stdout
    assert "gres/gpu" not in shown, shown
    wait_until(lambda: _serves(endpoint), timeout=30, what="a completion through the gateway job")

    # the only frontend relaunched under a client loop: the requests of the gap wait at the
    # holder beside nginx on the node
    sent, failed = _only_frontend_killed(h, name)
    assert sent and failed == 0, (sent, failed)

    # a config change (no holder any more) reaches the running nginx as a reload through Slurm
    # (scancel --batch --signal=HUP), confirmed by its page: the same job, not a new one
    # a reload that says what the last one said is folded into its line (count + 1, the line moved
    # to the end: drivers/event_fold.py), so reloads are counted by the lines' counts, not lines
    # (a soak run of 2026-12-07: "upstreams now vm:26801" twice, two lines before and after)
    def reload_count() -> int:
        return sum(e.get("count", 1) for e in events(h, name, "GatewayReloaded"))

    reloads = reload_count()
    (h.manifests / f"{name}.yaml").write_text(RECIPE.format(name=name, node=NODE).replace("hold_seconds: 60",
                                                                                         "hold_seconds: 0"))

    def reloaded() -> bool:  # nginx on the node serves the holder-less config, and the record says so
        rec = json.loads((h.state / name / "gateway.json").read_text())
        want = version(GatewayConfig(name, rec["port"], prefix_of(h.state, name), tuple(rec["upstreams"]),
                                     False, "0.0.0.0", None))
        page = json.loads(get(endpoint + "/gateway/health", timeout=2)[1])
        return page["version"] == want == rec["confirmed"]

    wait_until(reloaded, timeout=30, what="the job's nginx reloaded without its holder")
    assert reload_count() > reloads
    assert _gateway_jobs(h, name) == [(job, "RUNNING", NODE)]  # reloaded, not resubmitted
    wait_until(lambda: _serves(endpoint), timeout=30, what="served after the reload")

    # a restarted reconciler adopts the running job (found by its name): nothing submitted again
    h.kill9()
    assert _serves(endpoint)  # no reconciler: the gateway keeps serving
    h.start()
    h.idle(name)
    assert _gateway_jobs(h, name) == [(job, "RUNNING", NODE)] and len(events(h, name, "GatewaySubmitted")) == 1

    # the gateway's job cancelled: a new one on the same node serves the same address
    scancel(job)
    wait_until(lambda: events(h, name, "GatewayRestarted"), timeout=60, what="GatewayRestarted")
    jobs = _gateway_jobs(h, name)
    assert len(jobs) == 1 and jobs[0][0] != job and jobs[0][1:] == ("RUNNING", NODE), jobs
    wait_until(lambda: _serves(endpoint), timeout=30, what="the new gateway job serves")
    assert h.get(name)["endpoint"] == endpoint and facts(h.state, name)["up"]

    # deleted: the gateway job ends (nginx finishes what it carries, then the agent exits)
    (h.manifests / f"{name}.yaml").unlink()
    h.stop()
    h.start("--allow-empty")
    wait_until(lambda: not _gateway_jobs(h, name), timeout=60, what="the gateway job ended")
    wait_until(lambda: events(h, name, "GatewayStopped"), timeout=10, what="GatewayStopped")


@pytest.mark.multinode
def test_a_gateway_job_moves_with_its_node(mn):  # noqa: F811 - the fixture
    h, first, other = mn, "rnode3", "rnode2"
    name = h.name("gwmove")
    (h.manifests / f"{name}.yaml").write_text(RECIPE.format(name=name, node=first))
    h.start()
    endpoint = h.wait_ready(name, timeout=120)["endpoint"]
    assert endpoint.startswith(f"http://{first}:"), endpoint
    wait_until(lambda: _serves(endpoint), timeout=30, what="a completion through the gateway job")

    # another node: the gateway moves there (a new address), the old job ends
    (h.manifests / f"{name}.yaml").write_text(RECIPE.format(name=name, node=other))
    wait_until(lambda: events(h, name, "GatewayMoved"), timeout=60, what="GatewayMoved")
    moved = wait_until(lambda: (g := h.get(name))["status"] == "Ready" and g["endpoint"] != endpoint and g["endpoint"],
                       timeout=60, what="Ready at the new address")
    assert moved.startswith(f"http://{other}:"), moved
    started = [e["message"] for e in events(h, name, "GatewayStarted")]
    assert f"on {other} serves http://{other}:" in started[-1], started  # not the old job, told to stop
    wait_until(lambda: [j[1:] for j in _gateway_jobs(h, name)] == [("RUNNING", other)], timeout=60,
               what=f"one gateway job, on {other}")
    wait_until(lambda: _serves(moved), timeout=30, what="the moved gateway serves")
