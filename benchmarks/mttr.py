"""Time to repair on a real Slurm: a killed worker, and a reconciler killed mid-deploy.

    python benchmarks/mttr.py [--trials 5] [--resync 1]
    python benchmarks/mttr.py --smoke      # its smallest size (1 kill at backoff 0, then 2.): CI runs it

Its table is docs/performance.md, section "Time to repair (benchmarks/mttr.py)".

1. A one-worker mocker recipe (built-in router) with ``restart: {backoff_seconds: 0}``:
   scancel the worker's step, then time (a) until its replacement step shows in squeue
   (the relaunch issued) and (b) until the replacement answers /health (Ready again).
2. The same with the default backoff (10 s for the first restart).
3. kill -9 the reconciler right after it launched the first step of a two-worker
   recipe; start it again and time until the recipe is Ready (adopting what runs).
Prints figures; asserts nothing. Target: (1a) <= 1 s. Needs scripts/slurm-dev.sh up.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECIPE = """\
name: {name}
model: {{path: m}}
resources: {{gpus_per_node: 8}}
engine: {{type: mocker, speedup_ratio: 100}}
roles: {{agg: {{workers: {workers}, gpus: 1{restart}}}}}
frontend: {{type: builtin}}
"""
PORTS = os.environ.get("RECONCILER_PORT_RANGE", "32400-32600")  # a test gives its own range


def sh(*argv: str) -> str:
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True).stdout


def steps_of(lines: list[str], owner: str, tag: str) -> dict[str, str]:
    """unit -> step id, from ``squeue -s -o %i|%j`` lines, for this run's reconciler (``owner``)
    and recipe (``tag``). The owner matters: two runs at once (two people's test runs on one
    Slurm) deploy the same recipe names, and one must not time, or scancel, the other's steps."""
    out = {}
    for line in lines:
        sid, _, name = line.partition("|")
        parts = name.split(":")
        if len(parts) == 7 and parts[0] == "rcl" and parts[1] == owner and parts[2] == tag:
            out[f"{parts[3]}_{parts[4]}"] = sid
    return out


def jobs_of(lines: list[str], owner: str) -> list[str]:
    """Job ids, from ``squeue -o %i|%j`` lines, of this run's reconciler (``owner``)."""
    return [line.partition("|")[0] for line in lines if line.partition("|")[2].startswith(f"rcl:{owner}:")]


def steps(owner: str, tag: str) -> dict[str, str]:
    return steps_of(sh("squeue", "-h", "-s", "-o", "%i|%j").splitlines(), owner, tag)


def healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as r:
            return r.status == 200
    except OSError:
        return False


def until(pred, timeout: float, what: str, poll: float = 0.02):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(poll)
    raise TimeoutError(what)


class Run:
    def __init__(self, tmp: Path, resync: float):
        self.tmp, self.resync = tmp, resync
        self.manifests, self.state = tmp / "manifests", tmp / "state"
        self.manifests.mkdir()
        self.env = {**os.environ, "RECONCILER_PORT_RANGE": PORTS}
        (tmp / "srtslurm.yaml").write_text(json.dumps({"host_runtime": {"python": sys.executable}}))
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "reconciler.cli", "run", "--manifests", str(self.manifests), "--state",
             str(self.state), "--driver", "slurm", "--resync", str(self.resync)],
            stdout=open(self.tmp / "reconciler.log", "ab"), stderr=subprocess.STDOUT, cwd=self.tmp, env=self.env)

    def get(self, name: str) -> dict:
        r = subprocess.run([sys.executable, "-m", "reconciler.cli", "get", name, "-o", "json", "--manifests",
                            str(self.manifests), "--state", str(self.state), "--driver", "slurm"],
                           capture_output=True, text=True, timeout=60, cwd=self.tmp, env=self.env)
        return json.loads(r.stdout)[0] if r.returncode == 0 else {}

    def ready(self, name: str, timeout: float = 60) -> None:
        until(lambda: self.get(name).get("status") == "Ready", timeout, f"{name} Ready", poll=0.2)

    def port(self, name: str, unit: str) -> int:
        st = json.loads((self.state / name / "status.json").read_text())
        return next(w["ports"]["http"] for w in st["workers"] if w["name"] == unit)

    def tag(self, name: str) -> str:
        from reconciler import labels

        return labels.recipe_tag(name)

    @property
    def owner(self) -> str:
        """The label `run` puts on its jobs and steps for this state directory (its default --instance)."""
        from reconciler import labels

        return labels.default_owner(self.state)


def kill_and_time(run: Run, name: str, ready_timeout: float) -> tuple[float, float]:
    tag = run.tag(name)
    old = until(lambda: steps(run.owner, tag).get("agg_0"), 30, "agg_0 step")
    port = run.port(name, "agg_0")
    t0 = time.monotonic()
    sh("scancel", old)
    until(lambda: (s := steps(run.owner, tag).get("agg_0")) and s != old, ready_timeout, "the relaunched step")
    issued = time.monotonic() - t0
    until(lambda: healthy(port), ready_timeout, "the relaunched worker healthy")
    ready = time.monotonic() - t0
    run.ready(name)  # the reconciler agrees before the next trial
    return issued, ready


def main() -> None:
    global PORTS
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--resync", type=float, default=1.0)
    ap.add_argument("--port-range", default=None, help="ports for the workers (default $RECONCILER_PORT_RANGE, else 32400-32600)")
    ap.add_argument("--smoke", action="store_true",
                    help="the smallest size (1 kill at backoff 0, no default-backoff kills, then the kill -9): that it runs")
    a = ap.parse_args()
    PORTS = a.port_range or PORTS
    trials = {"backoff 0": 1 if a.smoke else a.trials, "default backoff": 0 if a.smoke else 2}
    sys.path.insert(0, str(ROOT))
    rows: list[tuple[str, str]] = []
    with tempfile.TemporaryDirectory(prefix="mttr-") as d:
        run = Run(Path(d), a.resync)
        try:
            run.start()
            for label, restart, timeout in (("backoff 0", ", restart: {backoff_seconds: 0}", 30),
                                            ("default backoff", "", 120)):
                if not trials[label]:
                    continue
                name = f"mttr-{label.split()[0]}"
                (run.manifests / f"{name}.yaml").write_text(RECIPE.format(name=name, workers=1, restart=restart))
                run.ready(name)
                print(f"{label}: killing agg_0 {trials[label]} times ...", file=sys.stderr)
                got = [kill_and_time(run, name, timeout) for _ in range(trials[label])]
                issued, ready = [g[0] for g in got], [g[1] for g in got]
                rows.append((f"{label}: step killed -> relaunch in squeue",
                             f"median {statistics.median(issued):.2f} s, max {max(issued):.2f} s ({trials[label]} kills)"))
                rows.append((f"{label}: step killed -> Ready (/health 200)",
                             f"median {statistics.median(ready):.2f} s, max {max(ready):.2f} s"))
                (run.manifests / f"{name}.yaml").unlink()
            # kill -9 during a deploy, then restart
            name = "mttr-kill9"
            (run.manifests / f"{name}.yaml").write_text(RECIPE.format(name=name, workers=2, restart=""))
            until(lambda: steps(run.owner, run.tag(name)), 60, "the first step of the deploy")
            run.proc.send_signal(signal.SIGKILL)
            run.proc.wait(10)
            t0 = time.monotonic()
            run.start()
            run.ready(name, timeout=120)
            rows.append(("kill -9 mid-deploy: restart -> Ready", f"{time.monotonic() - t0:.2f} s"))
            (run.manifests / f"{name}.yaml").unlink()
            for f in run.manifests.glob("*.yaml"):
                f.unlink()
        finally:
            if run.proc and run.proc.poll() is None:
                # a stopped reconciler leaves its workloads (and gateways) running, by design
                run.proc.send_signal(signal.SIGTERM)
                run.proc.wait(20)
            for f in run.manifests.glob("*.yaml"):
                f.unlink()
            # one pass over no manifest tears down what is left, gateways (nginx on this host) included:
            # each run left one per recipe listening, and a later run in the same port range had its
            # frontend refused its port again and again ('could not bind ... another process holds it')
            subprocess.run([sys.executable, "-m", "reconciler.cli", "run", "--once", "--allow-empty", "--manifests",
                            str(run.manifests), "--state", str(run.state), "--driver", "slurm"], capture_output=True,
                           timeout=120, cwd=run.tmp, env=run.env)
            # this run's jobs only: another run's (the same recipe names) are not ours to cancel or wait for
            ours = lambda: jobs_of(sh("squeue", "-h", "-o", "%i|%j").splitlines(), run.owner)  # noqa: E731
            for jid in ours():
                subprocess.run(["scancel", jid], capture_output=True)
            # scancel returns before the steps are gone: their logs are still written meanwhile, and
            # the directory can only be removed once they are
            until(lambda: not ours(), 60, "our jobs gone after the teardown", poll=0.5)
            from reconciler.shell.gateway.sweep import quit_under

            quit_under(run.tmp)  # any the pass could not stop (a master it did not know of)
    width = max(len(r[0]) for r in rows)
    print(f"MTTR on the local Slurm (resync {a.resync:g} s)")
    print(f"  {'what'.ljust(width)}  figure")
    for k, v in rows:
        print(f"  {k.ljust(width)}  {v}")


if __name__ == "__main__":
    main()
