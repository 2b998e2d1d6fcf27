"""Wall time of the read commands (`get`, `describe`, `events`, `logs`, `benchmarks`) on a state
directory of N deployments, as a user's shell runs them: a new `python -m reconciler.cli` each time.

    python benchmarks/read_commands.py [--deployments 100] [--runs 5]
    python benchmarks/read_commands.py --smoke      # 5 deployments, 2 runs: CI runs it

Its table is docs/performance.md, section "Read commands (benchmarks/read_commands.py)".

The state directory is what `run` leaves: per deployment a status.json of two mocker workers and a
router (conditions, worker rows, roles, endpoint, served model), a frontend log of 2,000 lines and
a benchmark summary; an events.jsonl of 50 events per deployment; run.json, and run.lock held by
this process as a running `run` holds it (so read commands take `run`'s record). Bytecode is
cached in a private directory (PYTHONPYCACHEPREFIX; an installed package has its .pyc, and
PYTHONDONTWRITEBYTECODE=1 would time the compiler instead) and each command runs once unmeasured
first. Also printed: a
bare `python -c pass` (the interpreter's own start, which every command pays), the median CPU
time of the command's process (user + system, which a busy machine stretches much less than the
wall time) and the number of
modules of the controller (reconciler.shell.loop, reconciler.desired.build) each command imported.
Prints; asserts nothing.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from reconciler.cli import run_settings  # noqa: E402
from reconciler.drivers.base import step_log_paths  # noqa: E402
from reconciler.timefmt import iso  # noqa: E402

PROBE = ("import runpy, sys; sys.argv = ['reconciler'] + sys.argv[1:]\n"
         "try:\n    runpy.run_module('reconciler.cli', run_name='__main__')\n"
         "except SystemExit:\n    pass\n"
         "print('CONTROLLER', sum(m in sys.modules for m in ('reconciler.shell.loop', 'reconciler.desired.build')),"
         " file=sys.stderr)")


def status(name: str, i: int, now: float) -> dict:
    def worker(role: str, index: int, port: int) -> dict:
        return {"name": f"{role}_{index}", "role": role, "index": index, "phase": "Ready", "ready": True,
                "nodes": ["node1"], "gpus": [index], "ports": {"http": port}, "url": f"http://node1:{port}",
                "upToDate": True, "available": True,
                "steps": [f"{1000 + i}.{index}"], "specHash": "0123456789ab", "restarts": index,
                "lastExit": None}
    cond = [{"type": t, "status": s, "reason": r, "message": m, "lastTransitionTime": iso(now - 600),
             "observedGeneration": "abc"} for t, s, r, m in (
        ("Ready", "True", "AllReady", "2/2 workers ready, frontend ready"),
        ("Available", "True", "MinimumWorkersAvailable", "serving: agg 2/2, a frontend answers"),
        ("Progressing", "False", "Converged", "every worker runs the current spec and is ready"),
        ("Degraded", "False", "AsExpected", "no worker is down"),
        ("Invalid", "False", "Valid", "the recipe file validates"))]
    port = 20000 + 3 * i
    return {"name": name, "phase": "Ready", "observedGeneration": "abc", "createdAt": iso(now - 3600),
            "updatedAt": iso(now - 600), "conditions": cond,
            "roles": {"agg": {"desired": 2, "ready": 2, "running": 2, "unavailable": 0},
                      "frontend": {"desired": 1, "ready": 1, "running": 1, "unavailable": 0}},
            "replicas": {"desired": 2, "ready": 2, "upToDate": 2, "available": 2},
            "endpoint": f"http://login01:{port + 2}", "servedModel": "Qwen/Qwen3-0.6B",
            "workers": [worker("agg", 0, port), worker("agg", 1, port + 1), worker("frontend", 0, port + 2)],
            "pendingAllocations": [], "reason": None, "reasonMessage": None}


def build_state(root: Path, n: int) -> list[str]:
    now = time.time()
    names = [f"dep-{i:03d}" for i in range(n)]
    events = []
    for i, name in enumerate(names):
        d = root / name
        (d / "logs").mkdir(parents=True)
        (d / "benchmarks").mkdir()
        (d / "status.json").write_text(json.dumps(status(name, i, now), indent=2))
        (d / "detail.json").write_text(json.dumps(  # describe's live facts, as run records them
            {"error": None, "suspended": False, "units": {}, "benchmarkState": None, "allocations": [
                {"job": str(1000 + i), "index": 0, "state": "RUNNING", "reason": "None", "nodes": ["node1"],
                 "timeLimit": "4:00:00", "timeLeft": None, "endsAt": now + 3600}]}))
        step_log_paths(root, name, "frontend_0", 0).log.write_text("".join(f"INFO request {k} served\n" for k in range(2000)))
        (d / "benchmarks" / "20261206T100000Z.json").write_text(json.dumps(
            {"run": "20261206T100000Z", "status": "passed", "type": "sa-bench", "req_s": 12.5, "errors": 0}))
        events += [{"time": iso(now - 3000 + k), "kind": "Condition", "recipe": name,
                    "message": f"Ready=True: 2/2 workers ready ({k})"} for k in range(50)]
    (root / "files.json").write_text(json.dumps({f"/m/{n}.yaml": [n] for n in names}))
    (root / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in sorted(events, key=lambda e: e["time"])))
    run_settings.write(root, {"instance": "bench", "portRange": "20000-32000", "driver": "local",
                              "manifests": str(root.parent / "manifests"), "state": str(root), "clusterConfig": None})
    return names


def _cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def timed(argv: list[str], cwd: Path) -> tuple[float, float, int, int]:
    """Wall and CPU seconds (user + system: what a busy machine does not stretch much), exit, controller modules."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(cwd / "pycache")
    t, c = time.perf_counter(), _cpu()
    r = subprocess.run([sys.executable, *argv], capture_output=True, text=True, cwd=cwd, env=env)
    wall, cpu = time.perf_counter() - t, _cpu() - c
    ctl = next((int(x.split()[1]) for x in r.stderr.splitlines() if x.startswith("CONTROLLER ")), -1)
    return wall, cpu, r.returncode, ctl


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--deployments", type=int, default=100)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--smoke", action="store_true", help="5 deployments, 2 runs")
    a = ap.parse_args()
    n, runs = (5, 2) if a.smoke else (a.deployments, a.runs)
    with tempfile.TemporaryDirectory(prefix="read-commands-") as tmp:
        root = Path(tmp) / "state"
        names = build_state(root, n)
        lock = open(root / "run.lock", "a")  # noqa: SIM115 - held until the end, as a running `run` holds it
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        one = names[n // 2]
        cases = [("python -c pass", ["-c", "pass"])] + [
            (f"{' '.join(c)}", ["-c", PROBE, *c, "--state", str(root)]) for c in (
                ("get",), ("get", "-o", "wide"), ("get", "-o", "json"), ("describe", one), ("events",),
                ("events", one), ("logs", one), ("benchmarks", one))]
        print(f"{n} deployments, {runs} runs each, python {sys.version.split()[0]}")
        print(f"{'command':<24} {'median s':>9} {'min s':>7} {'max s':>7} {'cpu s':>7} {'exit':>5} {'controller':>10}")
        for label, argv in cases:
            timed(argv, Path(tmp))  # compiles what it imports into the cache
            got = [timed(argv, Path(tmp)) for _ in range(runs)]
            walls = [g[0] for g in got]
            ctl = "-" if label.startswith("python") else str(got[-1][3])
            print(f"{label:<24} {statistics.median(walls):9.3f} {min(walls):7.3f} {max(walls):7.3f} "
                  f"{statistics.median(g[1] for g in got):7.3f} {got[-1][2]:5d} {ctl:>10}")
        lock.close()


if __name__ == "__main__":
    main()
