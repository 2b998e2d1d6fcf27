"""The benchmark step: aiperf against a deployment's endpoint, once per concurrency, then one summary.

    python -m reconciler.benchrun --aiperf PATH --url URL --out DIR --subject HASH --plan JSON

``--plan`` (built by reconciler/desired/sources/benchmark.py from the recipe's ``benchmark:``
section): ``{"type", "isl", "osl", "max_error_rate", "timeout", "levels": [{"concurrency",
"args"}]}``. Each level's raw aiperf artifacts go under ``DIR/<run>/c<concurrency>/``; the
summary (reconciler/benchrun/summary.py) is written to ``DIR/<run>.json`` last, atomically, so a
reader never sees half of one. Exit 0: Succeeded; 3: Failed (the reason is in the summary);
a SIGTERM (the step cancelled by a rollout) stops aiperf and records the run as Cancelled.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path

from reconciler.benchrun.summary import CANCELLED, SUCCEEDED, level_summary, records_summary, summarize, verdict
from reconciler.fsutil import atomic_write_text

EXPORT = "profile_export_aiperf.json"
KEEP_RUNS = 100  # the newest runs kept (summary and raw artifacts); older ones are removed after each run


class Cancelled(Exception):
    pass


def _term(signum, frame):  # noqa: ARG001 - signal handler signature
    raise Cancelled()


def why_failed(log: Path) -> str:
    """The line of aiperf's output that says why: its last error line, else its last line."""
    lines = [l.strip(" │|") for l in log.read_text(errors="replace").splitlines() if l.strip(" │|")]
    errors = [l for l in lines if "error" in l.lower() or "exception" in l.lower()]
    return ((errors or lines or [""])[-1])[-300:]


def aiperf_env(base: Mapping[str, str], tmp: str, left: float) -> dict[str, str]:
    """aiperf's environment. Its services must register with its controller within 30 s (10
    attempts a second apart), its guess for a quiet host: on a busy node (a CPU-bound suite beside
    it, load 21 on 2 cores) they did not, and the level failed "Some services failed to register
    within timeout". The benchmark's own ``timeout_seconds`` bounds the run, so the window is the
    time it has left (at least aiperf's 30 s); a value set in the environment wins."""
    window = str(min(100_000, max(30, math.ceil(left))))  # aiperf's own bounds: 1..100000
    return ({k: v for k, v in base.items() if k != "HF_HUB_OFFLINE"} | {"TMPDIR": tmp}
            | {k: base.get(k, window) for k in ("AIPERF_SERVICE_REGISTRATION_TIMEOUT",
                                                "AIPERF_SERVICE_REGISTRATION_MAX_ATTEMPTS")})


def run_level(aiperf: str, url: str, art: Path, level: dict, deadline: float) -> dict:
    """One aiperf invocation; its figures, or ``failed`` with why."""
    art.mkdir(parents=True, exist_ok=True)
    argv = [aiperf, "profile", *level["args"], "--url", url, "--artifact-dir", str(art)]
    # aiperf's ZMQ sockets live under TMPDIR and a deep one is past their path limit
    with tempfile.TemporaryDirectory(prefix="bench", dir="/tmp") as tmp, open(art / "aiperf.log", "wb") as log:
        env = aiperf_env(os.environ, tmp, deadline - time.time())
        try:
            p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        except OSError as e:
            return {"concurrency": level["concurrency"], "failed": f"cannot start aiperf ({aiperf}): {e.strerror or e}"}
        try:
            code = p.wait(timeout=max(1.0, deadline - time.time()))
        except (subprocess.TimeoutExpired, Cancelled) as e:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            if isinstance(e, Cancelled):
                raise
            return {"concurrency": level["concurrency"], "failed": "timed out (reconcile.benchmark.timeout_seconds)"}
    export = art / EXPORT
    if code != 0 or not export.exists():
        records = art / "profile_export.jsonl"
        got = records_summary(records.read_text(errors="replace").splitlines(), level["concurrency"]) \
            if records.exists() else None
        if got is not None:
            return got
        return {"concurrency": level["concurrency"], "failed": f"aiperf exited {code}: {why_failed(art / 'aiperf.log')}"}
    return level_summary(json.loads(export.read_text()), level["concurrency"])


def served_as(url: str, name: str) -> str:
    """The name the endpoint lists for the model: ``name``, or the listed path whose last component it is
    (an engine started with a model path and no served name lists the path: dynamo.mocker does). The
    reconciler's frontend canary matches the same way; unknown (no answer): ``name`` as given."""
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/v1/models", timeout=10) as r:
            listed = [str(m.get("id")) for m in json.loads(r.read(1 << 20)).get("data", []) if isinstance(m, dict)]
    except (OSError, ValueError, AttributeError):
        return name
    if name in listed:
        return name
    return next((m for m in listed if m.rstrip("/").rsplit("/", 1)[-1] == name), name)


def with_model(args: list[str], model: str) -> list[str]:
    out = list(args)
    if "--model" in out:
        out[out.index("--model") + 1] = model
    return out


def prune(out: Path, keep: int = KEEP_RUNS) -> list[str]:
    """Remove all but the newest ``keep`` runs (run names sort by their UTC start): a periodic
    benchmark must not fill the state directory. Returns the runs removed."""
    runs = sorted(p.stem for p in out.glob("*.json"))
    gone = runs[:-keep] if keep > 0 else runs
    for run in gone:
        shutil.rmtree(out / run, ignore_errors=True)
        (out / f"{run}.json").unlink(missing_ok=True)
    return gone


def find_aiperf() -> str:
    """aiperf lives in its own venv (scripts/stacks-install.sh); the step finds it on the node, so the
    recipe's spec does not name a path of this machine."""
    env = os.environ.get("RECONCILER_AIPERF")
    stacks = Path(__file__).resolve().parents[2] / ".stacks" / "aiperf" / "bin" / "aiperf"
    for candidate in (env, str(stacks) if stacks.exists() else None, shutil.which("aiperf")):
        if candidate:
            return candidate
    return "aiperf"  # not found: the level fails with the reason (aiperf exited ... / not found)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m reconciler.benchrun")
    for flag in ("--url", "--out", "--subject", "--plan"):
        p.add_argument(flag, required=True)
    p.add_argument("--aiperf", default=None, help="aiperf's path (default: $RECONCILER_AIPERF, the project's "
                                                  ".stacks/aiperf, or aiperf on PATH)")
    a = p.parse_args(argv)
    a.aiperf = a.aiperf or find_aiperf()
    plan = json.loads(a.plan)
    started = time.time()
    run = datetime.fromtimestamp(started, timezone.utc).strftime("%Y%m%dT%H%M%SZ") + f"-{a.subject[:8]}"
    out = Path(a.out)
    raw = out / run
    meta = {"run": run, "type": plan["type"], "subject": a.subject, "url": a.url, "isl": plan["isl"],
            "osl": plan["osl"], "started": started, "artifacts": str(raw)}
    signal.signal(signal.SIGTERM, _term)
    levels: list[dict] = []
    cancelled = False
    print(f"benchmark {run}: {plan['type']} against {a.url}, concurrencies "
          f"{[lv['concurrency'] for lv in plan['levels']]}", flush=True)
    try:
        given = next((lv["args"][lv["args"].index("--model") + 1] for lv in plan["levels"] if "--model" in lv["args"]), "")
        model = served_as(a.url, given) if given else given
        for level in plan["levels"]:
            level = level | {"args": with_model(level["args"], model)} if model else level
            got = run_level(a.aiperf, a.url, raw / f"c{level['concurrency']}", level, started + plan["timeout"])
            levels.append(got)
            print(f"benchmark {run}: concurrency {level['concurrency']}: {json.dumps(got)}", flush=True)
            if verdict([got], plan["osl"], plan["max_error_rate"])[0] != SUCCEEDED:
                break  # the run has failed: the higher concurrencies would only add load to a broken deployment
    except Cancelled:
        cancelled = True
    ended = time.time()
    summary = summarize(levels, meta | {"ended": ended, "duration_s": round(ended - started, 3)}, plan["osl"],
                        plan["max_error_rate"])
    if cancelled:
        summary |= {"status": CANCELLED, "reason": "stopped before it finished (its step was cancelled)"}
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / f"{run}.json", json.dumps(summary, indent=2) + "\n")
    prune(out)
    print(f"benchmark {run}: {summary['status']} {summary['reason']}", flush=True)
    return 0 if summary["status"] == SUCCEEDED else 3


if __name__ == "__main__":
    sys.exit(main())
