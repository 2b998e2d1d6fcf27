"""Node failure repair on a real multi-node Slurm: time from a node going down to the affected
workers Ready elsewhere, and the requests that failed through the router meanwhile.

    sudo bash scripts/slurm-multinode.sh up --nodes 3
    python benchmarks/node_failure.py [--how down|slurmd] [--runs 3] [--clients 2] [--resync 5]
    python benchmarks/node_failure.py --smoke      # its smallest size (1 run, 1 client, resync 1): CI runs it

Its table is docs/performance.md, section "Node failure (benchmarks/node_failure.py)".

A mocker recipe with one worker per node allocation (2 workers, the built-in router) runs under
`reconciler run` against $SLURM_CONF (default /tmp/slurm-mn/slurm.conf). Each run fails the node
of the last worker — `scontrol update state=down` or its slurmd killed — waits until that worker
is Ready on another node, counts the clients' failed requests, then brings the node back (resume,
or the script restarting the slurmd) and waits out the cool-down (0 here) before the next run.
Needs root (scontrol update, killing a slurmd). It holds the cluster's tests.lock (beside its
slurm.conf) as the multinode tests do: a node failure must not hit another run's workers.
Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECIPE = """\
schema: 2
name: nodefail
model: {path: m}
resources: {gpus_per_node: 4}
engine: {type: mocker, speedup_ratio: 100}
roles: {agg: {workers: 2, gpus: 4, restart: {backoff_seconds: 0.5}}}
frontend: {type: builtin}
reconcile: {nodes_per_allocation: 1}
"""


def sh(*argv: str) -> str:
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True).stdout


class Clients:
    """``n`` clients posting completions back to back through the router."""

    def __init__(self, url: str, n: int):
        self.url, self.ok, self.failed = url, 0, 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(n)]
        for t in self._threads:
            t.start()

    def _run(self) -> None:
        body = json.dumps({"model": "m", "prompt": "hi", "max_tokens": 8}).encode()
        while not self._stop.is_set():
            req = urllib.request.Request(self.url + "/v1/completions", data=body,
                                         headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=10) as r:
                    good = r.status == 200
            except OSError:
                good = False
            with self._lock:
                if good:
                    self.ok += 1
                else:
                    self.failed += 1

    def counts(self) -> tuple[int, int]:
        with self._lock:
            return self.ok, self.failed

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(15)


def status(state: Path) -> dict:
    try:
        return json.loads((state / "nodefail" / "status.json").read_text())
    except (FileNotFoundError, ValueError):
        return {}


def wait(cond, timeout: float, what: str):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = cond()
        if v:
            return v
        time.sleep(0.05)
    raise SystemExit(f"timed out after {timeout:.0f} s waiting for {what}")


def rows(state: Path) -> dict[str, dict]:
    return {w["name"]: w for w in status(state).get("workers", [])}


def fail(node: str, how: str, conf: Path) -> None:
    if how == "down":
        sh("scontrol", "update", f"nodename={node}", "state=down", "reason=benchmarks/node_failure.py")
    else:
        pid = int((conf.parent / "run" / f"slurmd{node.removeprefix('rnode')}.rec").read_text())
        if Path(f"/proc/{pid}/comm").read_text().strip() != "slurmd":
            raise SystemExit(f"pid {pid} recorded for {node}'s slurmd is not a slurmd")
        os.kill(pid, signal.SIGKILL)


def restore(node: str, how: str, nodes_file: Path) -> None:
    if how == "slurmd":
        subprocess.run(["bash", str(ROOT / "scripts" / "slurm-multinode.sh"), "up", "--nodes", "3"],
                       capture_output=True, timeout=120)
    else:
        sh("scontrol", "update", f"nodename={node}", "state=resume")

    def usable():
        st = sh("sinfo", "-h", "-N", "-n", node, "-o", "%T").strip()
        try:
            sus = json.loads(nodes_file.read_text())["suspects"]
        except (FileNotFoundError, ValueError, KeyError):
            sus = {}
        return st.rstrip("*") in ("idle", "mixed", "allocated") and node not in sus
    wait(usable, 120, f"{node} back and out of its cool-down")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--how", choices=["down", "slurmd"], default="down")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--clients", type=int, default=2)
    ap.add_argument("--resync", type=float, default=5.0, help="the reconciler's --resync: a lost job is seen within it")
    ap.add_argument("--smoke", action="store_true", help="the smallest size (1 run, 1 client, resync 1): that it runs")
    a = ap.parse_args()
    if a.smoke:
        a.runs, a.clients, a.resync = 1, 1, 1.0
    conf = Path(os.environ.setdefault("SLURM_CONF", "/tmp/slurm-mn/slurm.conf"))
    if not conf.is_file():
        raise SystemExit(f"{conf} not found: start the cluster with scripts/slurm-multinode.sh up --nodes 3")
    with open(conf.parent / "tests.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        measure(a, conf)


def measure(a: argparse.Namespace, conf: Path) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="node-failure-"))
    (tmp / "manifests").mkdir()
    state = tmp / "state"
    log = open(tmp / "reconciler.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "reconciler.cli", "run", "--manifests", str(tmp / "manifests"),
                             "--state", str(state), "--driver", "slurm", "--resync", str(a.resync), "--node-cooldown", "0"],
                            stdout=log, stderr=subprocess.STDOUT)
    repairs, failures = [], []
    try:
        (tmp / "manifests" / "nodefail.yaml").write_text(RECIPE)
        wait(lambda: status(state).get("phase") == "Ready", 120, "the recipe Ready")
        clients = Clients(status(state)["endpoint"], a.clients)
        try:
            for i in range(a.runs):
                wait(lambda: clients.counts()[0] > 10, 30, "requests flowing")
                w = rows(state)
                victim, others = w["agg_1"]["nodes"][0], {n: w[n]["steps"] for n in w if n != "agg_1"}
                ok0, failed0 = clients.counts()
                t0 = time.monotonic()
                fail(victim, a.how, conf)

                def repaired():
                    r = rows(state).get("agg_1", {})
                    return r.get("phase") == "Ready" and r.get("nodes", [victim])[0] != victim
                wait(repaired, 180, f"agg_1 Ready off {victim}")
                took = time.monotonic() - t0
                ok1, failed1 = clients.counts()
                after = rows(state)
                untouched = all(after[n]["steps"] == s for n, s in others.items())
                repairs.append(took)
                failures.append(failed1 - failed0)
                if i == 0:
                    print(f"{'run':>3} {'how':>6} {'failed node':>11} {'moved to':>8} {'repair s':>8} {'requests ok':>11} "
                          f"{'failed':>6}  others untouched")
                print(f"{i + 1:>3} {a.how:>6} {victim:>11} {after['agg_1']['nodes'][0]:>8} {took:>8.2f} {ok1 - ok0:>11} "
                      f"{failed1 - failed0:>6}  {untouched}", flush=True)
                restore(victim, a.how, state / "nodes.json")
        finally:
            clients.stop()
        print(f"node failure ({a.how}, {a.runs} runs, {a.clients} clients, resync {a.resync:g} s): repair median "
              f"{statistics.median(repairs):.2f} s (max {max(repairs):.2f} s); requests failed "
              f"{sum(failures)} in all (max {max(failures)} per failure)")
    finally:
        for f in (tmp / "manifests").glob("*.yaml"):
            f.unlink()
        proc.terminate()
        proc.wait()
        subprocess.run([sys.executable, "-m", "reconciler.cli", "run", "--once", "--allow-empty", "--manifests",
                        str(tmp / "manifests"), "--state", str(state), "--driver", "slurm"], capture_output=True)


if __name__ == "__main__":
    main()
