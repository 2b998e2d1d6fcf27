"""Slurm-native time on the real (one-node) Slurm: allocations submitted with --time-min, a job whose
limit Slurm lowered is handed over in time with no failed request, and a pending allocation held
behind a foreign job is explained as ``squeue --start`` explains it."""

from __future__ import annotations

import json
import math
import subprocess
import threading
import time
from pathlib import Path

import pytest

from harness import Harness, job_fields, sh, slurm_epoch
from private_slurm import running
from helpers import free_port, get, wait_until
from support.clients import Client, labelled_metric as _metric, sending, stop
from support.clusters import deployed
from support.record import events, routed

from reconciler.core.plan.pending import words
from reconciler.timefmt import slurm_seconds

pytestmark = pytest.mark.slurm

TEXT = """\
name: {name}
model: {{path: m}}
resources: {{gpus_per_node: 8}}
engine: {{type: mocker, speedup_ratio: 100}}
roles: {{agg: {{workers: 2, gpus: 1, restart: {{backoff_seconds: 1}}}}}}
frontend: {{type: builtin, args: {{poll-interval: 0.2}}}}
slurm: {{time_limit: "10", time_min: "2"}}
reconcile: {{handover_seconds: 40, rollout: {{pickup_seconds: 1, drain_seconds: 1}}}}
"""


def test_a_job_whose_limit_slurm_lowered_is_handed_over_in_time_with_no_failed_request(tmp_path):
    with deployed(tmp_path, TEXT, "lowered") as (h, name, endpoint):
        (first,) = h.jobs(name)
        f = job_fields(first)
        # submitted with --time 10 --time-min 2: Slurm grants 2 to 10 minutes. A busy node (another
        # test's jobs holding GPUs) may have it started by backfill at the minimum already (a soak
        # run of 2026-12-07: TimeLimit 00:02:00), which this test then lowers no further
        assert f["TimeMin"] == "00:02:00" and 2 <= _minutes(f["TimeLimit"]) <= 10, f
        wait_until(lambda: len(routed(h, name)) == 2, what="both workers routed")
        with sending(Client(endpoint, limit=20000), join=15) as (client,):
            wait_until(lambda: client.ok >= 5, what="requests before the limit is lowered")
            # Slurm lowers the limit (as backfill with --time-min would grant less): 60-120 s left now,
            # far less than the 10 minutes asked for; the plan reads the end from squeue each tick
            elapsed = time.time() - slurm_epoch(job_fields(first)["StartTime"])
            minutes = min(math.ceil((elapsed + 60) / 60), int(_minutes(job_fields(first)["TimeLimit"])))
            sh("scontrol", "update", f"jobid={first}", f"timelimit={minutes}")
            end = slurm_epoch(job_fields(first)["EndTime"])
            wait_until(lambda: first not in h.jobs(name) and len(h.jobs(name)) == 1, timeout=end - time.time() + 30,
                       interval=0.5, what=f"the hand-over away from job {first} (jobs: {h.jobs(name)})")
            gone_at = time.time()
            assert gone_at < end  # released by us before Slurm's lowered end
            g = h.wait_ready(name)
            assert g["endpoint"] == endpoint
            client.wait_more(5, what="requests after the hand-over")
            stop(client, join=15)
            evs = events(h, name)
            assert [e for e in evs if e["kind"] == "AllocationLost"] == []
            succ = [e for e in evs if e["kind"] == "SubmitAlloc" and f"successor of job {first}" in e["message"]]
            assert len(succ) == 1, [e["message"] for e in evs if e["kind"] == "SubmitAlloc"]
            assert client.failed == [], (client.ok, client.failed[:5])


def _minutes(limit: str) -> float:
    """A Slurm time limit as scontrol prints it, in minutes."""
    return slurm_seconds(limit) / 60


QUEUED = """\
name: {name}
model: {{path: m}}
resources: {{gpus_per_node: 8}}
engine: mocker
frontend: {{type: none}}
roles: {{agg: {{workers: 1, gpus: 8}}}}
"""


class Hog(threading.Thread):
    """Foreign jobs holding every GPU that is free, taking the ones other jobs free as they go,
    2-minute limits: an 8-GPU allocation of ours waits behind them."""

    def __init__(self, tmp: Path):
        super().__init__(daemon=True)
        self.tmp, self.jobs, self.halt = tmp, [], threading.Event()

    def free(self) -> int:
        node = dict(t.split("=", 1) for t in sh("scontrol", "-d", "-o", "show", "node").split() if "=" in t)
        return int(node["Gres"].split(":")[-1].split("(")[0]) - int(node["GresUsed"].split(":")[-1].split("(")[0])

    def run(self) -> None:
        while not self.halt.is_set():
            n = self.free()
            if n > 0:
                self.jobs.append(sh("sbatch", "--parsable", f"--gres=gpu:{n}", "--time=2", "--output=/dev/null",
                                    f"--chdir={self.tmp}", "--job-name=slurmtime-gpu-hog", "--wrap",
                                    "sleep 110").strip())
            self.halt.wait(0.5)

    def stop(self) -> None:
        self.halt.set()
        self.join(30)
        for j in self.jobs:  # ours; some may have ended already
            subprocess.run(["scancel", j], capture_output=True, timeout=60)


def start_row(job: str) -> tuple[str, str] | None:
    """(expected start, reason) as `squeue --start` prints them for ``job``."""
    for line in sh("squeue", "--start", "-h", "-j", job, "-o", "%i|%S|%r").splitlines():
        j, start, reason = line.split("|")
        if j == job:
            return start, reason
    return None


def test_a_pending_allocation_is_explained_as_squeue_start_explains_it(tmp_path, monkeypatch):
    # on a Slurm of the test's own (tests/private_slurm.py): the hog holds every GPU for minutes,
    # which on the shared dev Slurm starved every other test's allocation meanwhile (soak run 2)
    with running(tmp_path / "slurm", monkeypatch, gpus=8):
        _explained(tmp_path)


def _explained(tmp_path: Path) -> None:
    h = Harness(tmp_path, "slurm")
    hog = Hog(tmp_path)
    hog.start()
    try:
        wait_until(lambda: hog.jobs and hog.free() == 0, timeout=60, what="every GPU held")
        name = h.name("queued")
        (h.manifests / f"{name}.yaml").write_text(QUEUED.format(name=name))
        mport = free_port()
        h.start("--metrics-addr", f"127.0.0.1:{mport}")
        (job,) = wait_until(lambda: h.jobs(name), timeout=30, what="our allocation submitted")

        def same():
            row = start_row(job)
            if row is None or row[0] in ("N/A", ""):
                return None  # the backfill scheduler has not estimated it yet
            r = h.cli("describe", name, "-o", "json")
            (a,) = [a for a in json.loads(r.stdout)["allocations"] if a["job"] == job]
            start = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(slurm_epoch(row[0])))
            return (a, row) if (a.get("expectedStart"), a.get("reason")) == (start, row[1]) else None

        a, row = wait_until(same, timeout=120, interval=2, what="describe to match squeue --start")
        # Resources; or Priority when other users' jobs queued behind the hogs are ahead of ours
        assert row[1] in ("Resources", "Priority") and a["reasonText"] == words(row[1])
        assert a["message"].startswith(f"allocation 0 (job {job}) pending ")
        # get reads what `run` recorded, describe asks Slurm now: the record follows at run's next
        # look at squeue --start (its slow questions are asked when due, shell/cluster/slurm_watch.py)
        def recorded():
            (g,) = json.loads(h.cli("get", name, "-o", "json").stdout)
            return [(p["job"], p["reason"], p["expectedStart"]) for p in g["pendingAllocations"]]
        wait_until(lambda: recorded() == [(job, row[1], a["expectedStart"])], timeout=60, interval=2,
                   what="get's pending allocation to say what describe says")
        # the running reconciler said it in an event, and exports the seconds it has waited
        wait_until(lambda: any(e["kind"] == "AllocationPending" and e.get("expectedStart") == a["expectedStart"]
                               for e in events(h, name)), timeout=60, what="the AllocationPending event")
        waited = wait_until(lambda: _metric(get(f"http://127.0.0.1:{mport}/metrics", timeout=3)[1].decode(),
                                            "reconciler_pending_seconds", recipe=name), timeout=30,
                            what="reconciler_pending_seconds > 0")
        assert waited > 0
        hog.stop()
        h.wait_ready(name, timeout=240)
        assert _metric(get(f"http://127.0.0.1:{mport}/metrics", timeout=3)[1].decode(),
                       "reconciler_pending_seconds", recipe=name) == 0
    finally:
        hog.stop()
        h.cleanup()

