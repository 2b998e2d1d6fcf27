"""The real vLLM (its CPU build) under the reconciler on the local Slurm, beside the mocker set to match.

    python benchmarks/real_engine.py [--requests 40] [--concurrency 1,4]
    python benchmarks/real_engine.py --smoke   # one eager cold start, aiperf at concurrency 1 with 2 requests: CI runs it

Its tables are docs/performance.md, section "The real engine (benchmarks/real_engine.py)".

vLLM 0.32's CPU build (.stacks/vllm, scripts/stacks-install.sh) serves the tiny random-weights
Llama (reconciler.mocker.tiny_llama) with ``vllm serve`` as the vLLM backend renders it, behind
the built-in router and the gateway. Measured: the cold start from the file drop, split into
Slurm (launch -> step started), import (-> vLLM's first log line), load and warm-up (vLLM's own
figures) and the rest (engine core, API server, probes); a relaunch of the killed engine step;
a rolling update of an engine flag under a client loop (failed requests, time until the old
life left); aiperf through the gateway at each concurrency (ISL 32, OSL 16). Then the same
load against the built-in mocker given the vLLM's measured cold start as ``startup_time``.
Prints tables; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).parent))
from reconciler import labels  # noqa: E402
from reconciler.backends.vllm import start_phases  # noqa: E402
from reconciler.mocker.tiny_llama import make_tiny_llama  # noqa: E402
from reconciler.world import life_name  # noqa: E402
from stacks import AIPERF, aiperf, endpoint, fmt, model_id, pick, post_ok  # noqa: E402

VLLM_BIN = ROOT / ".stacks" / "vllm" / "bin"
VLLM = """\
name: {name}
model: {{path: {model}}}
resources: {{gpus_per_node: 8}}
engine: {{type: vllm}}
roles: {{agg: {{workers: 1, gpus: 1, args: {{max-model-len: 256, dtype: float32{args}}}}}}}
frontend: {{type: builtin}}
"""
MOCKER = """\
name: {name}
model: {{path: {model}}}
resources: {{gpus_per_node: 8}}
engine: {{type: mocker, speedup_ratio: 1, startup_time: {startup:.0f}}}
roles: {{agg: {{workers: 1, gpus: 1}}}}
frontend: {{type: builtin}}
reconcile: {{engine_python: {python}}}
"""
EAGER = ", enforce-eager: true"
WAIT = 1800.0  # the recipe's health-check budget (180 x 10 s): a start that takes longer has failed
SMOKE_WAIT = 1500.0  # under the smoke test's own 1,800 s, so this script tears down what it started


class Run:
    """One `reconciler run` over a scratch manifests directory."""

    def __init__(self, tmp: Path):
        self.tmp, self.manifests, self.state = tmp, tmp / "manifests", tmp / "state"
        self.manifests.mkdir()
        self.env = {**os.environ, "HF_HUB_OFFLINE": "1",
                    "RECONCILER_PORT_RANGE": os.environ.get("RECONCILER_PORT_RANGE", "20000-20999")}  # below the tests' span
        self.proc = subprocess.Popen([sys.executable, "-m", "reconciler.cli", "run", "--manifests", str(self.manifests),
                                      "--state", str(self.state), "--resync", "1"], cwd=tmp, env=self.env,
                                     stdout=open(tmp / "reconciler.log", "ab"), stderr=subprocess.STDOUT)
        self.owner = labels.default_owner(self.state)

    def launches(self, name: str) -> dict:
        return json.loads((self.state / name / "launches.json").read_text())["agg_0"]

    def step(self, name: str) -> tuple[str, float] | None:
        """(step id, start epoch) of the recipe's newest agg_0 step, from squeue."""
        out = subprocess.run(["squeue", "-h", "-s", "-o", "%i|%j|%S"], capture_output=True, text=True, timeout=30).stdout
        mine = []
        for line in out.splitlines():
            sid, job, start = line.split("|")
            parts = job.split(":")
            if len(parts) == 7 and parts[1] == self.owner and parts[2] == labels.recipe_tag(name) and parts[3] == "agg":
                mine.append((sid, datetime.strptime(start, "%Y-%m-%dT%H:%M:%S").timestamp()))
        return max(mine, key=lambda s: s[1]) if mine else None

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)
        for f in self.manifests.glob("*.yaml"):
            f.unlink()
        subprocess.run([sys.executable, "-m", "reconciler.cli", "run", "--once", "--allow-empty", "--manifests",
                        str(self.manifests), "--state", str(self.state)], cwd=self.tmp, env=self.env,
                       capture_output=True, timeout=120)


def until(what: str, fn, timeout: float | None = None, every: float = 0.5):
    timeout = WAIT if timeout is None else timeout  # read at the call: --smoke lowers it
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if v := fn():
            return v
        time.sleep(every)
    raise SystemExit(f"no {what} within {timeout:.0f} s")


def serving(run: Run, name: str) -> tuple[str, str]:
    """(endpoint, model) once a chat completion succeeds through the gateway."""
    def ok():
        url = endpoint(run.state, name)
        mid = model_id(url) if url else None
        return (url, mid) if mid and post_ok(url, mid) else None
    return until(f"{name} serving", ok)


def split(run: Run, name: str, step_start: float) -> str:
    rec = until("the life's readyAfter", lambda: (r := run.launches(name)).get("readyAfter") is not None and r, 60)
    log = (run.state / name / "logs" / f"{life_name('agg_0', rec['slot'])}.0.log").read_text(errors="replace")
    p = start_phases(log, datetime.fromtimestamp(rec["lastLaunch"]).year)
    slurm = max(0.0, step_start - rec["lastLaunch"])
    imports = max(0.0, p.get("first_line", step_start) - step_start)
    total = rec["readyAfter"]
    rest = total - slurm - imports - p.get("load", 0) - p.get("warmup", 0)
    return (f"{total:.1f} | {slurm:.1f} | {imports:.1f} | {p.get('load', 0):.2f} | {p.get('warmup', 0):.1f} | "
            f"{rest:.1f}")


class Loop(threading.Thread):
    """Sequential chat completions until stopped: answers and failures."""

    def __init__(self, url: str, model: str):
        super().__init__(daemon=True)
        self.url, self.model, self.ok, self.failed, self.halt = url, model, 0, 0, threading.Event()

    def run(self) -> None:
        body = json.dumps({"model": self.model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}).encode()
        while not self.halt.is_set() and self.ok + self.failed < 100_000:
            req = urllib.request.Request(self.url + "/v1/chat/completions", body, {"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=60) as r:
                    r.read()
                    self.ok += 1
            except OSError:
                self.failed += 1


def load_rows(label: str, url: str, model: str, tokenizer: Path, tmp: Path, conc: list[int], requests: int) -> list[str]:
    rows = []
    for c in conc:
        out = tmp / f"aiperf-{label.split()[0]}-{c}"
        out.mkdir()
        doc = aiperf(url, model, tokenizer, c, requests, out, isl=32, osl=16)
        rows.append(f"| {label} | {c} | {fmt(pick(doc, 'request_throughput', 'avg'), 2)} | "
                    f"{fmt(pick(doc, 'time_to_first_token', 'p50'))} | {fmt(pick(doc, 'time_to_first_token', 'p99'))} | "
                    f"{fmt(pick(doc, 'inter_token_latency', 'p50'), 2)} | "
                    f"{sum(e.get('count', 1) for e in doc.get('error_summary') or [])} |")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=40, help="aiperf requests per concurrency")
    ap.add_argument("--concurrency", default="1,4")
    ap.add_argument("--smoke", action="store_true", help="one eager cold start, aiperf at concurrency 1 with 2 requests")
    a = ap.parse_args()
    if a.smoke:
        global WAIT
        a.requests, a.concurrency, WAIT = 2, "1", SMOKE_WAIT
    conc = [int(c) for c in a.concurrency.split(",")]
    for need in (AIPERF, VLLM_BIN / "vllm"):
        if not need.exists():
            raise SystemExit(f"missing {need}: run scripts/stacks-install.sh")
    tmp = Path(tempfile.mkdtemp(prefix="bench-real-"))
    model = make_tiny_llama(tmp / "tiny-llama")
    (tmp / "home").mkdir()
    (tmp / "srtslurm.yaml").write_text(json.dumps({"host_runtime": {"python": str(VLLM_BIN / "python"), "env": {
        "PATH": f"{VLLM_BIN}:/usr/local/bin:/usr/bin:/bin", "VLLM_CPU_KVCACHE_SPACE": "1", "HOME": str(tmp / "home"),
        "HF_HUB_OFFLINE": "1",
        # unpinned, one thread each: vLLM's automatic binding puts every engine on the same core here
        "VLLM_CPU_OMP_THREADS_BIND": "nobind", "OMP_NUM_THREADS": "1"}}}))
    run = Run(tmp)
    (run.manifests / "parked.yaml").write_text(MOCKER.format(name="parked", model=model, startup=0, python=sys.executable)
                                               + "  suspend: true\n")
    starts, loads, rolls = [], [], []
    try:
        name = "bench-vllm"
        t0 = time.monotonic()
        # the smoke only shows the script still runs: vLLM without torch.compile (enforce-eager),
        # and the mocker after it given 5 s, not the measured start (minutes of CI's time each)
        (run.manifests / f"{name}.yaml").write_text(VLLM.format(name=name, model=model, args=EAGER if a.smoke else ""))
        print("[vllm] deploying (a cold start: minutes) ...", flush=True)
        url, mid = serving(run, name)
        first = time.monotonic() - t0
        label = "cold start (eager: --smoke)" if a.smoke else "cold start"
        starts.append(f"| {label} | {first:.1f} | {split(run, name, run.step(name)[1])} |")
        print(f"[vllm] first completion through the gateway {first:.1f} s after the drop", flush=True)
        loads += load_rows("vLLM 0.32 (CPU)", url, mid, model, tmp, conc, a.requests)
        cold = run.launches(name).get("readyAfter") or first
        if not a.smoke:
            old = run.step(name)
            t0 = time.monotonic()
            subprocess.run(["scancel", old[0]], capture_output=True, timeout=30)
            new = until("a new step", lambda: (s := run.step(name)) and s[0] != old[0] and s)
            until(f"{name} Ready again", lambda: json.loads((run.state / name / "status.json").read_text())
                  .get("phase") == "Ready" and post_ok(url, mid))
            starts.append(f"| relaunch (killed step) | {time.monotonic() - t0:.1f} | {split(run, name, new[1])} |")
            loop = Loop(url, mid)
            loop.start()
            old = run.step(name)
            t0 = time.monotonic()
            (run.manifests / f"{name}.yaml").write_text(VLLM.format(name=name, model=model, args=", max-num-seqs: 64"))
            new = until("the new life", lambda: (s := run.step(name)) and s[0] != old[0] and s)
            until("the old life gone", lambda: subprocess.run(["squeue", "-h", "-s", "-j", old[0].split(".")[0]],
                                                               capture_output=True, text=True).stdout.count(old[0]) == 0)
            took = time.monotonic() - t0
            loop.halt.set()
            loop.join(90)
            rolls.append(f"| rolling update (max-num-seqs) | {took:.1f} | {loop.ok} | {loop.failed} |")
            starts.append(f"| rolled life | - | {split(run, name, new[1])} |")
        (run.manifests / f"{name}.yaml").unlink()
        until("the vLLM deployment gone", lambda: run.step(name) is None, timeout=120)
        mname = "bench-mocker"
        cold = min(cold, 5.0) if a.smoke else cold
        (run.manifests / f"{mname}.yaml").write_text(MOCKER.format(name=mname, model=model, startup=cold,
                                                                   python=sys.executable))
        murl, mmid = serving(run, mname)
        loads += load_rows(f"mocker (startup_time {cold:.0f} s)", murl, mmid, model, tmp, conc, a.requests)
    finally:
        run.close()
    print("| start | drop or kill → serving s | launch → Ready s | Slurm s | import s | load s | warm-up s | rest s |")
    print("|---|---|---|---|---|---|---|---|")
    print("\n".join(starts))
    if rolls:
        print("| update | edit → old life gone s | requests | failed |")
        print("|---|---|---|---|")
        print("\n".join(rolls))
    print("| engine | conc | req/s | TTFT p50 ms | TTFT p99 ms | ITL p50 ms | failed |")
    print("|---|---|---|---|---|---|---|")
    print("\n".join(loads))
    print(f"(scratch and logs: {tmp})")


if __name__ == "__main__":
    main()
