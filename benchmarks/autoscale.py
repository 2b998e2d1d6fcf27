"""An autoscaled deployment against the same one fixed at its maximum, under a load that steps up and down.

    python benchmarks/autoscale.py [--mode agg|disagg|pd] [--max 4] [--low 20] [--high 60] [--tail 60] [--clients 16]
    python benchmarks/autoscale.py --smoke     # its smallest size (agg, max 2, short phases): CI runs it
    python benchmarks/autoscale.py --zero 15 --idle 60   # + scale to zero: an idle phase, then one request

Its table is docs/performance.md, section "Autoscaling (benchmarks/autoscale.py)".

Runs `reconciler run` on the real Slurm (or the local driver without sbatch) with a mocker
recipe behind the built-in router (aggregated, max_num_seqs 2 so that a load queues; or with
--mode disagg, 2 prefill workers and the decode role colocated on their node; with --mode pd,
prefill and decode each on a node of its own), twice: (a) ``reconcile.autoscale`` from 1 to MAX
workers (agg; decode; or prefill and decode, each on its own queue) on ``waiting_per_worker``, (b)
fixed at MAX.
The same closed-loop load drives both: 1 streaming client for --low s, --clients for --high s,
1 again for --tail s. Per run: requests, failed, the share whose TTFT and mean ITL are within
the targets (--ttft-ms, --itl-ms, measured by the client), worker GPU-seconds held (GPUs of the
workers that had a step, sampled from status.json every 0.5 s), job GPU-seconds (what the
recipe's Slurm jobs hold, from squeue, on the same samples), the time from the step up to
the first Scaled event (decided) and to one more worker in the router's endpoints (serving).
With ``--zero S`` the autoscaled run may go to zero (``min: 0``, ``scale_to_zero_after_seconds: S``)
and both runs get an idle phase of --idle s after the tail (no client), then one request through
the gateway (held while the deployment wakes up): the idle phase's GPU-seconds and that request's
latency and outcome are printed too.
Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import calendar
import http.client
import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

RECIPE = """\
name: {name}
model: {{path: m}}
resources: {{gpus_per_node: 8}}
engine: {{type: mocker, speedup_ratio: 1, max_num_seqs: 2}}
roles: {{agg: {{workers: {workers}, gpus: 1}}}}
frontend: {{type: builtin, args: {{poll-interval: 0.2}}}}
"""
# disaggregated on one node: decode colocated on the prefill node, so decode alone is autoscaled
# (recipe/autoscale.py refuses prefill then: its count would move every decode worker's GPUs);
# the prefill role is the same 2 workers in both runs
DISAGG = """\
name: {name}
model: {{path: m}}
resources: {{gpus_per_node: 8}}
roles:
  prefill: {{nodes: 1, workers: 2, gpus: 1, engine: {{type: mocker, speedup_ratio: 1, max_num_seqs: 64}}}}
  decode: {{nodes: colocate, workers: {workers}, gpus: 1, engine: {{type: mocker, speedup_ratio: 1, max_num_seqs: 2}}}}
frontend: {{type: builtin, args: {{poll-interval: 0.2}}}}
"""
# prefill and decode on nodes of their own, each autoscaled on its own queue (one Slurm node here:
# one allocation per node ordinal, so both roles' jobs share it); both roles start at 1
PD = """\
name: {name}
model: {{path: m}}
resources: {{gpus_per_node: 8}}
roles:
  prefill: {{nodes: 1, workers: {workers}, gpus: 1, engine: {{type: mocker, speedup_ratio: 1, max_num_seqs: 2}}}}
  decode: {{nodes: 1, workers: {workers}, gpus: 1, engine: {{type: mocker, speedup_ratio: 1, max_num_seqs: 2}}}}
frontend: {{type: builtin, args: {{poll-interval: 0.2}}}}
"""
RECONCILE = """\
reconcile:
  nodes_per_allocation: 1
"""
AUTOSCALE = """\
  autoscale:
    roles:
{roles}
    interval_seconds: 2
    scale_down_after_seconds: {down}
    drain_seconds: 1
"""
ZERO = """\
    scale_to_zero_after_seconds: {zero}
    hold_timeout_seconds: 600
"""


class Client(threading.Thread):
    """Streaming chat completions one after another until stopped: (ok, ttft s, mean itl s) each."""

    def __init__(self, endpoint: str, max_tokens: int):
        super().__init__(daemon=True)
        u = urlsplit(endpoint)
        self.host, self.port, self.max_tokens = u.hostname, u.port, max_tokens
        self.results: list[tuple[bool, float, float, float]] = []  # (ok, ttft, mean itl, sent at)
        self.halt = threading.Event()
        self.timeout = 60.0  # a held request (scale to zero) waits for a worker: longer

    def run(self) -> None:
        while not self.halt.is_set():
            self.once()

    def once(self) -> None:
        body = json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": self.max_tokens,
                           "stream": True}).encode()
        t0 = time.monotonic()
        times: list[float] = []
        ok = False
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        try:
            conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
            r = conn.getresponse()
            if r.status == 200:
                for line in r:
                    if line.startswith(b"data: ") and b'"content"' in line:
                        times.append(time.monotonic())
                    elif line.startswith(b"data: [DONE]"):
                        ok = True
            else:
                r.read()
        except (OSError, http.client.HTTPException):
            ok = False
        finally:
            conn.close()
        ttft = times[0] - t0 if times else float("inf")
        itl = (times[-1] - times[0]) / (len(times) - 1) if len(times) > 1 else 0.0
        self.results.append((ok and bool(times), ttft, itl, t0))


def read_json(p: Path) -> dict:
    try:
        return json.loads(p.read_text())
    except (FileNotFoundError, ValueError):
        return {}


def held_gpus(name: str) -> int | None:
    """GPUs the recipe's Slurm jobs hold now (squeue: gres per node x nodes), None off Slurm."""
    try:
        out = subprocess.run(["squeue", "-h", "-o", "%j|%b|%D"], capture_output=True, text=True, timeout=5).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    total = 0
    for line in out.splitlines():
        job, gres, nodes = (line.split("|") + ["", "", ""])[:3]
        if f":{name}:" in job and gres.rsplit(":", 1)[-1].isdigit() and nodes.isdigit():
            total += int(gres.rsplit(":", 1)[-1]) * int(nodes)
    return total


def one_run(tmp: Path, driver: str, a, autoscaled: bool) -> dict:
    name = f"bench-{'auto' if autoscaled else 'fixed'}"
    state = tmp / "state"
    text = {"disagg": DISAGG, "pd": PD}.get(a.mode, RECIPE).format(name=name, workers=1 if autoscaled else a.max)
    text += RECONCILE
    if autoscaled:
        roles = {"disagg": ("decode",), "pd": ("prefill", "decode")}.get(a.mode, ("agg",))
        low = 0 if a.zero is not None else 1
        text += AUTOSCALE.format(down=a.down, roles="\n".join(
            f"      {r}: {{min: {low}, max: {a.max}, target: {{waiting_per_worker: 1}}}}" for r in roles))
        text += ZERO.format(zero=a.zero) if a.zero is not None else ""
    f = tmp / "manifests" / f"{name}.yaml"
    f.write_text(text)
    deadline = time.monotonic() + 120
    while not (st := read_json(state / name / "status.json")).get("phase") == "Ready":
        if time.monotonic() > deadline:
            raise SystemExit(f"{name}: not Ready in 120 s")
        time.sleep(0.2)
    endpoint = st["endpoint"]
    gpu_s, job_gpu_s, samples, stop = [0.0], [0.0], threading.Event(), threading.Event()
    step_at: list[float] = []
    serving_at: list[float] = []
    baseline: list[int] = []

    def sample() -> None:
        last = time.monotonic()
        while not stop.wait(0.5):
            now = time.monotonic()
            rows = read_json(state / name / "status.json").get("workers", [])
            gpu_s[0] += (now - last) * sum(len(r.get("gpus", [])) for r in rows if r.get("steps"))
            if driver == "slurm":  # what the allocations hold (the workers may use less)
                job_gpu_s[0] += (now - last) * (held_gpus(name) or 0)
            last = now
            eps = read_json(state / name / "endpoints.json").get("workers", [])
            if step_at and not baseline:
                baseline.append(len(eps))  # the workers routed at the step
            if step_at and not serving_at and baseline and len(eps) > baseline[0]:
                serving_at.append(now)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    clients = [Client(endpoint, a.tokens)]
    clients[0].start()
    time.sleep(a.low)
    step_at.append(time.monotonic())
    wall_step = time.time()
    burst = [Client(endpoint, a.tokens) for _ in range(a.clients - 1)]
    for c in burst:
        c.start()
    time.sleep(a.high)
    for c in burst:
        c.halt.set()
    for c in burst:
        c.join(60)
    time.sleep(a.tail)
    clients[0].halt.set()
    clients[0].join(60)
    idle_gpu_s, wake = None, None
    if a.zero is not None:
        before = gpu_s[0]
        time.sleep(a.idle)  # no client: the autoscaled run goes to zero, the fixed one holds its GPUs
        idle_gpu_s = gpu_s[0] - before
        one = Client(endpoint, a.tokens)
        one.timeout = 660.0  # held up to the hold timeout (600 s), then streamed
        t0 = time.monotonic()
        one.once()
        wake = (one.results[0][0], time.monotonic() - t0)
    stop.set()
    sampler.join(5)
    results = [r for c in clients + burst for r in c.results]
    good = [ok and ttft * 1000 <= a.ttft_ms and itl * 1000 <= a.itl_ms for ok, ttft, itl, _ in results]
    within = sum(good)
    # where the misses are: by the phase the request was sent in (the first 15 s of the high
    # phase apart: the wait for the added workers)
    step = step_at[0]
    edges = [("low", -1e9), ("step +15 s", step), ("high", step + 15), ("tail", step + a.high)]
    phases = {phase: [0, 0] for phase, _ in edges}
    for (_, _, _, sent), g in zip(results, good):
        phase = [n for n, t in edges if sent >= t][-1]
        phases[phase][0] += 1
        phases[phase][1] += 0 if g else 1
    decided = None
    for line in (state / "events.jsonl").read_text().splitlines():
        e = json.loads(line)
        if e.get("recipe") == name and e.get("kind") == "Scaled" and "scaled up" in e.get("message", ""):
            t = calendar.timegm(time.strptime(e["time"], "%Y-%m-%dT%H:%M:%SZ"))  # UTC, to the second
            if t >= int(wall_step):
                decided = max(0.0, t - wall_step)
                break
    f.unlink()
    deadline = time.monotonic() + 120
    while read_json(state / name / "status.json").get("phase") != "Deleted" and time.monotonic() < deadline:
        time.sleep(0.2)
    return {"run": "autoscaled" if autoscaled else f"fixed {a.max}", "requests": len(results),
            "failed": sum(1 for ok, *_ in results if not ok), "within": 100.0 * within / max(1, len(results)),
            "gpu_s": gpu_s[0], "job_gpu_s": job_gpu_s[0] if driver == "slurm" else None, "decided": decided,
            "serving": serving_at[0] - step_at[0] if serving_at and autoscaled else None,
            "idle_gpu_s": idle_gpu_s, "wake": wake, "phases": phases}


def floor(a) -> tuple[float, float]:
    """The least share of the fixed run's GPU-seconds this load allows (agg: the high phase needs
    every worker, a low one needs one, the idle phase none): for a count that follows the load at
    once, and for one that also keeps the recipe's windows (max workers for ``down`` s after the
    high phase, one for ``zero`` s into the idle phase). The time a scale-up takes is not counted:
    a run may land a little under it."""
    idle = a.idle if a.zero is not None else 0.0
    fixed = a.max * (a.low + a.high + a.tail + idle)
    instant = a.low + a.max * a.high + a.tail
    windows = instant + (a.max - 1) * min(a.down, a.tail + idle) + (min(a.zero, idle) if a.zero is not None else 0.0)
    return 100 * instant / fixed, 100 * windows / fixed


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--max", type=int, default=4, help="the most workers (and the fixed run's count)")
    ap.add_argument("--clients", type=int, default=16, help="clients during the high phase")
    ap.add_argument("--low", type=float, default=20.0, help="seconds of 1 client before the step up")
    ap.add_argument("--high", type=float, default=60.0, help="seconds of the high load")
    ap.add_argument("--tail", type=float, default=60.0, help="seconds of 1 client after it")
    ap.add_argument("--down", type=float, default=20.0, help="scale_down_after_seconds")
    ap.add_argument("--tokens", type=int, default=32, help="max_tokens per request")
    ap.add_argument("--ttft-ms", type=float, default=500.0)
    ap.add_argument("--itl-ms", type=float, default=40.0)
    ap.add_argument("--mode", choices=["agg", "disagg", "pd"], default="agg",
                    help="aggregated; prefill + decode colocated (decode autoscaled); or each on its own node (both)")
    ap.add_argument("--driver", default=None)
    ap.add_argument("--smoke", action="store_true", help="the smallest size (max 2, short phases): that it runs")
    ap.add_argument("--zero", type=float, default=None, help="scale_to_zero_after_seconds (and the idle phase)")
    ap.add_argument("--idle", type=float, default=60.0, help="seconds without a client after the tail (--zero)")
    a = ap.parse_args()
    if a.smoke:
        a.max, a.clients, a.low, a.high, a.tail, a.down = 2, 6, 1.0, 6.0, 4.0, 2.0
    driver = a.driver or ("slurm" if shutil.which("sbatch") else "local")
    tmp = Path(tempfile.mkdtemp(prefix="autoscale-"))
    (tmp / "manifests").mkdir()
    # an empty recipe stays, so deleting the measured one is not "every manifest gone" (refused)
    (tmp / "manifests" / "keep.yaml").write_text(RECIPE.format(name="keep", workers=0).replace("builtin", "none"))
    log = open(tmp / "reconciler.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "reconciler.cli", "run", "--manifests", str(tmp / "manifests"),
                             "--state", str(tmp / "state"), "--driver", driver, "--resync", "2"],
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        rows = [one_run(tmp, driver, a, True), one_run(tmp, driver, a, False)]
        print(f"{'run':>10} {'requests':>8} {'failed':>6} {'within %':>8} {'GPU-s':>7} {'job GPU-s':>9} "
              f"{'decided s':>9} {'serving s':>9}")
        for r in rows:
            dec = f"{r['decided']:.1f}" if r["decided"] is not None else "-"
            srv = f"{r['serving']:.1f}" if r["serving"] is not None else "-"
            job = f"{r['job_gpu_s']:.1f}" if r["job_gpu_s"] is not None else "-"
            print(f"{r['run']:>10} {r['requests']:>8} {r['failed']:>6} {r['within']:>8.1f} {r['gpu_s']:>7.1f} "
                  f"{job:>9} {dec:>9} {srv:>9}", flush=True)
        for r in rows:
            print(f"{r['run']:>10} missed per phase (sent in): " + ", ".join(
                f"{n} {m}/{k}" for n, (k, m) in r["phases"].items()), flush=True)
        if a.zero is not None:
            for r in rows:
                ok, took = r["wake"]
                print(f"{r['run']:>10} idle {a.idle:g} s: {r['idle_gpu_s']:.1f} GPU-s; then one request: "
                      f"{'ok' if ok else 'FAILED'} in {took:.1f} s", flush=True)
        auto, fixed = rows
        held = (f" (held by the jobs: {100 * auto['job_gpu_s'] / max(fixed['job_gpu_s'], 1e-9):.0f} %)"
                if auto["job_gpu_s"] is not None else "")
        print(f"autoscale ({driver}, {a.mode}, 1..{a.max} workers, {a.clients} clients for {a.high:g} s): GPU-seconds "
              f"{100 * auto['gpu_s'] / max(fixed['gpu_s'], 1e-9):.0f} % of the fixed run{held} (target <= 60 %), "
              f"{auto['within']:.1f} % within TTFT {a.ttft_ms:g} ms / ITL {a.itl_ms:g} ms (target >= 95 %), "
              f"failed {auto['failed']} (target 0)")
        if a.mode == "agg":
            instant, windows = floor(a)
            print(f"this load's floor (agg): {instant:.0f} % of the fixed run's GPU-seconds for a count that follows "
                  f"the load at once; {windows:.0f} % with the recipe's windows (scale-down after {a.down:g} s"
                  + (f", to zero after {a.zero:g} s)" if a.zero is not None else ")"), flush=True)
    finally:
        for f in (tmp / "manifests").glob("*.yaml"):
            f.unlink()
        proc.terminate()
        proc.wait()
        subprocess.run([sys.executable, "-m", "reconciler.cli", "run", "--once", "--allow-empty", "--manifests",
                        str(tmp / "manifests"), "--state", str(tmp / "state"), "--driver", driver],
                       capture_output=True)


if __name__ == "__main__":
    main()
