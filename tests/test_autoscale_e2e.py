"""reconcile.autoscale on the real Slurm, a mocker recipe behind the built-in router: a queue that
builds up adds workers; when it is gone the extra workers leave the router, drain and are stopped,
with no request failing on the way (a light client keeps sending through the scale-down). Every
wait is bounded; the checks read Slurm's steps, the router's endpoints file and the events."""

from __future__ import annotations

import pytest

from harness import sh
from helpers import wait_until
from support.autoscale import Load
from support.clients import stop
from support.clusters import deployed
from support.record import events, routed

pytestmark = pytest.mark.slurm

TEXT = """\
name: {name}
model: {{path: m}}
resources: {{gpus_per_node: 8}}
engine: {{type: mocker, speedup_ratio: 1, max_num_seqs: 2}}
roles: {{agg: {{workers: 1, gpus: 1}}}}
frontend: {{type: builtin, args: {{poll-interval: 0.2}}}}
reconcile:
  autoscale:
    roles:
      agg: {{min: 1, max: 3, target: {{waiting_per_worker: 2}}}}
    interval_seconds: 1
    scale_down_after_seconds: 8
    drain_seconds: 1
"""


def gres(job: str) -> str:
    """The GPUs per node Slurm gave the job (squeue's tres-per-node), as ``gpu:N``."""
    return sh("squeue", "-h", "-j", job, "-o", "%b").strip().removeprefix("gres/").removeprefix("gres:")


def test_load_adds_workers_and_its_end_drains_them_without_a_failed_request(tmp_path):
    with deployed(tmp_path, TEXT, "elastic", timeout=90) as (h, name, endpoint):
        wait_until(lambda: routed(h, name) == ["agg_0"], timeout=30, what="the one worker routed")
        with Load(endpoint, heavy=8) as load:
            light, heavy = load.light, load.heavy
            # the queue builds up: the autoscaler adds workers, Slurm runs them, the router gets them
            wait_until(lambda: len(routed(h, name)) >= 2, timeout=90, interval=0.5,
                       what=f"an added worker serving (events: {[e['message'] for e in events(h, name)][-5:]})")
            up = [e for e in events(h, name) if e["kind"] == "Scaled"]
            assert up and "scaled up" in up[0]["message"] and "waiting_per_worker" in up[0]["message"], up
            assert up[0]["from"] == 1 and up[0]["to"] >= 2
            steps = h.steps(name)
            assert "agg_1" in steps
            # an added worker is in a job of its own that holds its GPU (never packed into the first
            # worker's job, which was submitted for one GPU): Slurm's own view of both jobs
            jobs = {u: sid.split(".")[0] for u, (sid, _) in steps.items() if u.startswith("agg_")}
            assert len(set(jobs.values())) == len(jobs), jobs
            for job in set(jobs.values()):
                assert gres(job) == "gpu:1", (job, gres(job))
            g = h.get(name)
            assert g["autoscale"]["agg"]["desired"] >= 2 and (g["autoscale"]["agg"]["min"], g["autoscale"]["agg"]["max"]) == (1, 3)
            r = h.cli("describe", name)
            assert r.returncode == 0 and "Autoscale:" in r.stdout and "agg 1 -> " in r.stdout, r.stdout
            # the load goes; the light client keeps sending through the scale-down
            load.end()
            n = light.ok
            wait_until(lambda: set(h.steps(name)) == {"agg_0", "frontend_0"}, timeout=120, interval=0.5,
                       what="scaled back down to one worker")
            wait_until(lambda: light.ok >= n + 20, timeout=60, what="requests through the scale-down")
            stop(light)
            assert light.failed == [], light.failed[:5]
            assert all(c.failed == [] for c in heavy), [c.failed[:3] for c in heavy]
            assert sum(c.ok for c in heavy) > 0
            evs = events(h, name)
            down = [i for i, e in enumerate(evs) if e["kind"] == "Scaled" and "scaled down" in e["message"]]
            assert down, [e["message"] for e in evs]
            # every worker stopped by the scale-down left the router (Draining) before its step was
            # cancelled (which workers were added, and so which leave, depends on the load's timing)
            # (a stop for another reason — a duplicate step, a liveness restart under this load — is
            # not the scale-down's: the drain rule is about the workers it removes)
            stops = [(i, e) for i, e in enumerate(evs) if e["kind"] == "CancelStep" and "scaled down" in e["message"]]
            assert stops, [e["message"] for e in evs]
            for i, e in stops:
                victim = e["message"].split(f"{name}/", 1)[1].split(":", 1)[0]
                drained = [j for j, d in enumerate(evs[:i]) if d["kind"] == "Draining" and victim in d["message"]]
                assert drained, "\n".join([f"{victim} stopped without a Draining before it:"]
                                          + [f"{x['kind']}: {x['message']}" for x in evs[:i + 1] if x["kind"] != "Condition"])
            assert routed(h, name) == ["agg_0"]
            assert h.get(name)["autoscale"]["agg"]["desired"] == 1
            # the added workers' jobs are released with them
            wait_until(lambda: len(h.jobs(name)) == 1, timeout=30, what=lambda: f"one job left: {h.jobs(name)}")
