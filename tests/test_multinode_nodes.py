"""Node failures on the real 3-node Slurm: only the lost node's workers move, to a new allocation
that excludes it, while the others keep serving; the node is usable again after its cool-down.

Requests run through the router all along; the failed ones are counted.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from conftest import MULTINODE_CONF
from harness import Harness, sh
from helpers import post, wait_until
from support.clusters import mn, ranks, workers  # noqa: F401 - fixtures among them

pytestmark = pytest.mark.multinode
COOLDOWN = 6.0

NF = """\
schema: 2
name: {name}
model: {{path: m}}
resources: {{gpus_per_node: 4}}
engine: {{type: mocker, speedup_ratio: 100}}
roles:
  agg: {{workers: 2, gpus: 4, restart: {{backoff_seconds: 0.5}}}}
frontend: {{type: builtin}}
reconcile: {{nodes_per_allocation: 1}}
"""


class Traffic:
    """One client sending requests through the router back to back; counts what failed."""

    def __init__(self, url: str):
        self.url, self.ok, self.failed, self.errors = url, 0, 0, []
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                code, body = post(f"{self.url}/v1/completions", {"model": "m", "prompt": "hi", "max_tokens": 8},
                                  timeout=10)
            except OSError as e:
                code, body = 0, str(e).encode()
            if code == 200:
                self.ok += 1
            else:
                self.failed += 1
                self.errors.append((code, body[:200]))

    def stop(self) -> None:
        self._stop.set()
        self._t.join(15)


def events(h: Harness, kind: str) -> list[dict]:
    try:
        lines = (h.state / "events.jsonl").read_text().splitlines()
    except FileNotFoundError:
        return []
    return [e for e in map(json.loads, lines) if e["kind"] == kind]


def suspects(h: Harness) -> dict:
    try:
        return json.loads((h.state / "nodes.json").read_text())["suspects"]
    except (FileNotFoundError, ValueError, KeyError):
        return {}


def job_field(job: str, field: str) -> str:
    for tok in sh("scontrol", "-o", "show", "job", job).split():
        if tok.startswith(field + "="):
            return tok.split("=", 1)[1]
    return ""


def place(h: Harness, name: str) -> dict[str, tuple[str, str]]:
    """unit -> (step id, node) of the recipe's rank-0 steps."""
    return {u: v for (u, r), v in ranks(h, name).items() if r == 0}


def fail_and_repair(h: Harness, name: str, how: str, summary) -> str:
    """Fail the node of agg_1 (``how``: "down" via scontrol, "slurmd" killed); check the repair;
    return the node that failed."""
    before = place(h, name)
    victim = before["agg_1"][1]
    lost_job = before["agg_1"][0].split(".")[0]
    traffic = Traffic(h.get(name)["endpoint"])
    wait_until(lambda: traffic.ok >= 5, timeout=30, what="traffic flowing")
    t0 = time.monotonic()
    if how == "down":
        sh("scontrol", "update", f"nodename={victim}", "state=down", f"reason=mntest {name}")
    else:
        pid = int((MULTINODE_CONF.parent / "run" / f"slurmd{victim.removeprefix('rnode')}.rec").read_text())
        assert Path(f"/proc/{pid}/comm").read_text().strip() == "slurmd"
        import os
        import signal
        os.kill(pid, signal.SIGKILL)

    def moved():
        now = place(h, name)
        return "agg_1" in now and now["agg_1"][1] != victim and now["agg_1"][0].split(".")[0] != lost_job and now

    after = wait_until(moved, timeout=90, what=f"agg_1 re-placed off {victim} (log:\n{h.log()[-3000:]})")
    h.wait_ready(name, timeout=60)
    repair = time.monotonic() - t0
    wait_until(lambda: traffic.ok >= 5 + 5, timeout=30, what="traffic after the repair")
    traffic.stop()
    # only the lost worker moved: the other worker and the router kept their steps
    assert after["agg_0"] == before["agg_0"] and after["frontend_0"] == before["frontend_0"], (before, after)
    new_job = after["agg_1"][0].split(".")[0]
    assert victim in job_field(new_job, "ExcNodeList"), f"job {new_job} should exclude {victim}"
    # status and events name the node and Slurm's reason
    sus = [e for e in events(h, "NodeSuspect") if e["node"] == victim]
    assert sus, events(h, "NodeSuspect")
    lost = json.loads((h.state / name / "status.json").read_text())["lastAllocationLost"]
    assert victim in lost["nodes"] and victim in lost["message"], lost
    if how == "down":
        assert any(f"mntest {name}" in e["reason"] for e in sus), sus
        assert f"mntest {name}" in lost["message"], lost
    # in flight on the lost worker: at most the one request of this single client
    assert traffic.failed <= 1, traffic.errors
    summary(f"node failure ({how}): agg_1 Ready on {after['agg_1'][1]} {repair:.1f}s after {victim} failed; "
            f"requests ok {traffic.ok}, failed {traffic.failed}")
    return victim


def test_node_down_moves_only_its_workers_and_the_node_returns_after_cooldown(mn, summary):
    name = mn.name("mnfail")
    (mn.manifests / f"{name}.yaml").write_text(NF.format(name=name))
    mn.start("--node-cooldown", str(COOLDOWN))
    mn.wait_ready(name, timeout=60)
    victim = fail_and_repair(mn, name, "down", summary)
    # Slurm returns the node (ReturnToService=2, or we resume it); after the cool-down it is usable
    if node_state(victim).startswith("down"):
        sh("scontrol", "update", f"nodename={victim}", "state=resume")
    wait_until(lambda: victim not in suspects(mn), timeout=60, what=f"{victim} out of its cool-down")
    assert any(e["node"] == victim for e in events(mn, "NodeUsable"))
    # usable again: the next failure's replacement can only go there (the third node holds agg_0)
    second = fail_and_repair(mn, name, "down", summary)
    assert place(mn, name)["agg_1"][1] == victim, (second, place(mn, name))


def test_slurmd_killed_moves_only_its_workers(mn, summary):
    name = mn.name("mnslurmd")
    (mn.manifests / f"{name}.yaml").write_text(NF.format(name=name))
    mn.start("--node-cooldown", str(COOLDOWN))
    mn.wait_ready(name, timeout=60)
    fail_and_repair(mn, name, "slurmd", summary)


def node_state(node: str) -> str:
    return sh("sinfo", "-h", "-N", "-n", node, "-o", "%T").strip().lower()


def test_requeued_allocation_is_released_and_replaced_off_the_node(mn, summary):
    """A recipe that asks Slurm to requeue its jobs (sbatch_directives: requeue) gets its job back
    PENDING after a node failure, for Slurm's requeue delay: it is released and replaced now."""
    name = mn.name("mnrequeue")
    (mn.manifests / f"{name}.yaml").write_text(NF.format(name=name) + "sbatch_directives: {requeue: \"\"}\n")
    mn.start("--node-cooldown", str(COOLDOWN))
    mn.wait_ready(name, timeout=60)
    before = place(mn, name)
    victim, lost_job = before["agg_1"][1], before["agg_1"][0].split(".")[0]
    assert job_field(lost_job, "Requeue") == "1"
    t0 = time.monotonic()
    sh("scontrol", "update", f"nodename={victim}", "state=down", f"reason=mntest {name}")
    after = wait_until(lambda: (p := place(mn, name)).get("agg_1", ("", victim))[1] != victim and p, timeout=90,
                       what=f"agg_1 re-placed off {victim} (log:\n{mn.log()[-3000:]})")
    mn.wait_ready(name, timeout=60)
    assert after["agg_1"][0].split(".")[0] != lost_job
    assert after["agg_0"] == before["agg_0"] and after["frontend_0"] == before["frontend_0"]
    rq = [e for e in events(mn, "AllocationRequeued") if e["job"] == lost_job]
    assert rq and victim in rq[0]["message"], events(mn, "AllocationRequeued")
    assert lost_job not in sh("squeue", "-h", "-o", "%i").split()
    assert any(e["node"] == victim and f"mntest {name}" in e["reason"] for e in events(mn, "NodeSuspect"))
    assert victim in job_field(after["agg_1"][0].split(".")[0], "ExcNodeList")
    summary(f"node failure (requeued job): agg_1 Ready on {after['agg_1'][1]} {time.monotonic() - t0:.1f}s after "
            f"{victim} failed (Slurm would have held the job for its requeue delay)")


TWO_NODE = """\
schema: 2
name: {name}
model: {{path: m}}
resources: {{gpus_per_node: 4}}
engine: {{type: mocker, speedup_ratio: 100}}
roles:
  agg: {{workers: 1, gpus: 8, restart: {{backoff_seconds: 0.5}}}}
frontend: {{type: none}}
"""


def test_a_node_back_at_once_never_leaves_a_two_node_worker_unplaceable(mn, summary):
    """ReturnToService=2's case on this cluster (ReturnToService=1), without touching its config:
    the node is downed and resumed at once, so it is back before the reconciler asks — every node
    of the lost job is suspect, and excluding them all would leave 1 node for a 2-node worker."""
    name = mn.name("mnback")
    (mn.manifests / f"{name}.yaml").write_text(TWO_NODE.format(name=name))
    mn.start("--node-cooldown", "600", "--allow-empty")  # the suspects stay suspect for the whole test
    mn.wait_ready(name, timeout=60)
    before = ranks(mn, name)
    job = before[("agg_0", 0)][0].split(".")[0]
    nodes = sorted(v[1] for v in before.values())
    assert len(nodes) == 2
    import os
    import signal

    # the reconciler is held while the job ends and the node comes back, so that its next pass sees
    # the loss and both nodes usable in one go (with ReturnToService=2 the node may be back first)
    os.kill(mn.proc.pid, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        sh("scontrol", "update", f"nodename={nodes[0]}", "state=down", f"reason=mntest {name}")
        wait_until(lambda: job not in sh("squeue", "-h", "-o", "%i").split(), timeout=60, what=f"job {job} ended")
        sh("scontrol", "update", f"nodename={nodes[0]}", "state=resume")
        # back for Slurm: its slurmd answered (resumed, it is IDLE+NOT_RESPONDING for a moment)
        wait_until(lambda: " State=IDLE " in sh("scontrol", "-o", "show", "node", nodes[0]), timeout=60,
                   what=f"{nodes[0]} back")
    finally:
        os.kill(mn.proc.pid, signal.SIGCONT)
    wait_until(lambda: set(suspects(mn)) == set(nodes), timeout=60,
               what=f"both nodes of job {job} suspect (log:\n{mn.log()[-3000:]})")
    wait_until(lambda: (r := ranks(mn, name)) and r.get(("agg_0", 0), ("",))[0].split(".")[0] not in ("", job)
               and len(r) == 2, timeout=90, what=f"agg_0 placed again (log:\n{mn.log()[-3000:]})")
    mn.wait_ready(name, timeout=60)
    ready = time.monotonic() - t0
    assert "Requested node configuration is not available" not in mn.log()
    relaxed = events(mn, "ExclusionRelaxed")
    assert relaxed and relaxed[0]["recipe"] == name and len(relaxed[0]["nodes"]) == 1, relaxed
    # the steps gone before the harness reads them per unit (a 2-rank worker is two steps)
    (mn.manifests / f"{name}.yaml").unlink()
    wait_until(lambda: not ranks(mn, name), timeout=60, what="the worker's steps gone")
    summary(f"node back at once (ReturnToService=2's case): the 2-node worker Ready {ready:.1f}s after the failure")
