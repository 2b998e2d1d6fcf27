"""Autoscaling policies against the same deployment fixed at its maximum, under one load.

    python benchmarks/autoscale.py [--mode agg|disagg|pd] [--max 4] [--low 20] [--high 60] [--tail 60] [--clients 16]
    python benchmarks/autoscale.py --smoke     # its smallest size (agg, max 2, short phases): CI runs it
    python benchmarks/autoscale.py --zero 15 --idle 60   # + scale to zero: an idle phase, then one request
    python benchmarks/autoscale.py --startup 60 --profile ramp|step [--policies fixed,reactive,predictive,warm,planner]

Its table is docs/performance.md, section "Autoscaling (benchmarks/autoscale.py)".

Runs `reconciler run` on the real Slurm (or the local driver without sbatch) with a mocker
recipe behind the built-in router (aggregated, max_num_seqs 2 so that a load queues; or with
--mode disagg, 2 prefill workers and the decode role colocated on their node; with --mode pd,
prefill and decode each on a node of its own), once per policy, one after the other:
``fixed`` at MAX workers; ``reactive``: ``reconcile.autoscale`` from 1 to MAX (agg; decode; or
prefill and decode, each on its own queue), ``scale_down_after_seconds`` --down; ``predictive``:
``policy: predictive``, ``forecast_window_seconds`` --window, the scale-down window derived from the
measured startup (--down only if given); ``warm``: predictive with ``warm: 1`` (the load starts once
the spare is Ready); ``planner``: Dynamo's Planner as a decider, which the reconciler does not have:
the row says why it was not run (``reconciler validate``'s own refusal of the key), no figures.
--startup S gives every engine ``startup_time: S`` (a cold start of S seconds).
The load (closed loop, streaming, --tokens a request): without --profile today's step with the
target ``waiting_per_worker: 1`` and the policies reactive and fixed; ``--profile step``: 1 client
for --low s, --clients for --high s, 1 for --tail s; ``--profile ramp``: 1 client for --low s, one
more at a time up to --clients over --rise s, held --high s, one fewer at a time over --fall s, 1
for --tail s; with a profile the target is ``running_per_worker: 4`` (--target: a forecast needs a
total that moves before the queue forms). Per run: requests, failed, the share whose TTFT and mean
ITL are within the targets (--ttft-ms, --itl-ms, measured by the client), worker GPU-seconds held
(GPUs of the workers that had a step, spares included, sampled from status.json every 0.5 s while
the load runs), job GPU-seconds (what the recipe's Slurm jobs hold, from squeue, on the same
samples), each as a share of the fixed run's, and the time from the first load increase to the
first Scaled event (decided) and to one more worker in the router's endpoints (serving).
With ``--zero S`` the autoscaled runs may go to zero (``min: 0``, ``scale_to_zero_after_seconds: S``)
and every run gets an idle phase of --idle s after the tail (no client), then one request through
the gateway (held while the deployment wakes up): the idle phase's GPU-seconds and that request's
latency and outcome are printed too.
Ports: the reconciler's (RECONCILER_PORT_RANGE, e.g. 12000-13999). Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import calendar
import json
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from autoscale_load import Client, Load, need_floor, ramp, read_json, held_gpus, step

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
    drain_seconds: 1
"""
ZERO = """\
    scale_to_zero_after_seconds: {zero}
    hold_timeout_seconds: 600
"""


POLICIES = ("fixed", "reactive", "predictive", "warm", "planner")
ROLES = {"disagg": ("decode",), "pd": ("prefill", "decode")}
PLANNER = "    decider: dynamo-planner\n"  # what a recipe would say for Dynamo's Planner


def recipe(a, policy: str, name: str) -> str:
    text = {"disagg": DISAGG, "pd": PD}.get(a.mode, RECIPE).format(
        name=name, workers=a.max if policy == "fixed" else 1)
    if a.startup:
        text = text.replace("speedup_ratio: 1,", f"speedup_ratio: 1, startup_time: {a.startup:g},")
    text += RECONCILE
    if policy == "fixed":
        return text
    low = 0 if a.zero is not None else 1
    key, value = a.target.split("=", 1)
    text += AUTOSCALE.format(roles="\n".join(f"      {r}: {{min: {low}, max: {a.max}, target: {{{key}: {value}}}}}"
                                             for r in ROLES.get(a.mode, ("agg",))))
    if policy == "reactive" or a.down_set:
        text += f"    scale_down_after_seconds: {a.down:g}\n"
    if policy in ("predictive", "warm", "planner"):
        text += f"    policy: predictive\n    forecast_window_seconds: {a.window:g}\n"
    text += "    warm: 1\n" if policy == "warm" else PLANNER if policy == "planner" else ""
    return text + (ZERO.format(zero=a.zero) if a.zero is not None else "")


def planner_reason(tmp: Path, a) -> str:
    """Why the planner row is not run: the reconciler's own word on a recipe that asks for it."""
    f = tmp / "planner.yaml"
    f.write_text(recipe(a, "planner", "bench-planner"))
    r = subprocess.run([sys.executable, "-m", "reconciler.cli", "validate", str(f)], capture_output=True, text=True)
    out = (r.stdout + r.stderr).strip().splitlines()
    if r.returncode == 0:
        return "the recipe validates, but this benchmark has no driver for a Dynamo Planner decider"
    msg = re.sub(rf"^invalid {re.escape(str(f))}:(\d+): ", r"line \1: ", out[0] if out else "refused")
    return f"the reconciler has no Dynamo Planner decider; `reconciler validate` refuses it: {msg}"


def spares_ready(state: Path, name: str, a) -> bool:
    last = read_json(state / name / "autoscale.json").get("last", {})
    rows = [last.get(r, {}).get("spares", []) for r in ROLES.get(a.mode, ("agg",))]
    return all(rows) and all(s.get("ready") for row in rows for s in row)


def one_run(tmp: Path, driver: str, a, policy: str) -> dict:
    name = f"bench-{policy}"
    state = tmp / "state"
    f = tmp / "manifests" / f"{name}.yaml"
    f.write_text(recipe(a, policy, name))
    deadline = time.monotonic() + 120 + 2 * a.startup
    while not ((st := read_json(state / name / "status.json")).get("phase") == "Ready"
               and (policy != "warm" or spares_ready(state, name, a))):
        if time.monotonic() > deadline:
            raise SystemExit(f"{name}: not Ready{' with its spare' if policy == 'warm' else ''} in "
                             f"{120 + 2 * a.startup:g} s")
        time.sleep(0.2)
    endpoint = st["endpoint"]
    gpu_s, job_gpu_s, stop = [0.0], [0.0], threading.Event()
    serving_at: list[float] = []
    baseline: list[int] = []
    load = Load(endpoint, a.tokens, a.load)

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
            if load.first_increase is not None and not baseline:
                baseline.append(len(eps))  # the workers routed at the first increase
            if baseline and not serving_at and len(eps) > baseline[0]:
                serving_at.append(now)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    load.start()
    load.join()
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
    results = load.results()
    good = [ok and ttft * 1000 <= a.ttft_ms and itl * 1000 <= a.itl_ms for ok, ttft, itl, _ in results]
    decided = None
    for line in (state / "events.jsonl").read_text().splitlines():
        e = json.loads(line)
        if (e.get("recipe") == name and e.get("kind") == "Scaled" and "scaled up" in e.get("message", "")
                and load.first_increase_wall is not None):
            t = calendar.timegm(time.strptime(e["time"], "%Y-%m-%dT%H:%M:%SZ"))  # UTC, to the second
            if t >= int(load.first_increase_wall):
                decided = max(0.0, t - load.first_increase_wall)
                break
    f.unlink()
    deadline = time.monotonic() + 120
    while read_json(state / name / "status.json").get("phase") != "Deleted" and time.monotonic() < deadline:
        time.sleep(0.2)
    label = f"fixed {a.max}" if policy == "fixed" else "autoscaled" if a.legacy else policy
    return {"run": label, "policy": policy, "requests": len(results),
            "failed": sum(1 for ok, *_ in results if not ok), "within": 100.0 * sum(good) / max(1, len(results)),
            "gpu_s": gpu_s[0], "job_gpu_s": job_gpu_s[0] if driver == "slurm" else None, "decided": decided,
            "serving": serving_at[0] - load.first_increase if serving_at and load.first_increase else None,
            "idle_gpu_s": idle_gpu_s, "wake": wake, "phases": load.misses(good)}


def floor(a) -> tuple[float, float]:
    """The least share of the fixed run's GPU-seconds today's step allows (agg: the high phase needs
    every worker, a low one needs one, the idle phase none): for a count that follows the load at
    once, and for one that also keeps the recipe's windows (max workers for ``down`` s after the
    high phase, one for ``zero`` s into the idle phase). The time a scale-up takes is not counted:
    a run may land a little under it."""
    idle = a.idle if a.zero is not None else 0.0
    fixed = a.max * (a.low + a.high + a.tail + idle)
    instant = a.low + a.max * a.high + a.tail
    windows = instant + (a.max - 1) * min(a.down, a.tail + idle) + (min(a.zero, idle) if a.zero is not None else 0.0)
    return 100 * instant / fixed, 100 * windows / fixed


def share(x: float | None, ref: float | None) -> str:
    return f"{100 * x / ref:.0f}" if x is not None and ref else "-"


def report(rows: list[dict], a, driver: str, skipped: dict[str, str]) -> None:
    fixed = next((r for r in rows if r["policy"] == "fixed"), None)
    print(f"{'run':>10} {'requests':>8} {'failed':>6} {'within %':>8} {'GPU-s':>7} {'% fixed':>7} {'job GPU-s':>9} "
          f"{'% fixed':>7} {'decided s':>9} {'serving s':>9}")
    for r in rows:
        dec = f"{r['decided']:.1f}" if r["decided"] is not None else "-"
        srv = f"{r['serving']:.1f}" if r["serving"] is not None else "-"
        job = f"{r['job_gpu_s']:.1f}" if r["job_gpu_s"] is not None else "-"
        print(f"{r['run']:>10} {r['requests']:>8} {r['failed']:>6} {r['within']:>8.1f} {r['gpu_s']:>7.1f} "
              f"{share(r['gpu_s'], fixed and fixed['gpu_s']):>7} {job:>9} "
              f"{share(r['job_gpu_s'], fixed and fixed['job_gpu_s']):>7} {dec:>9} {srv:>9}", flush=True)
    for p, why in skipped.items():
        print(f"{p:>10} not run: {why}", flush=True)
    for r in rows:
        print(f"{r['run']:>10} missed per phase (sent in): " + ", ".join(
            f"{n} {m}/{k}" for n, (k, m) in r["phases"].items()), flush=True)
    if a.zero is not None:
        for r in rows:
            ok, took = r["wake"]
            print(f"{r['run']:>10} idle {a.idle:g} s: {r['idle_gpu_s']:.1f} GPU-s; then one request: "
                  f"{'ok' if ok else 'FAILED'} in {took:.1f} s", flush=True)
    print(f"({driver}, {a.mode}, {a.load.name} load 1..{a.clients} clients over {a.load.total:g} s, 1..{a.max} workers "
          f"on {a.target}, startup_time {a.startup:g} s; targets TTFT {a.ttft_ms:g} ms / ITL {a.itl_ms:g} ms)")
    if a.mode == "agg" and a.legacy:
        instant, windows = floor(a)
        print(f"this load's floor (agg): {instant:.0f} % of the fixed run's GPU-seconds for a count that follows "
              f"the load at once; {windows:.0f} % with the recipe's windows (scale-down after {a.down:g} s"
              + (f", to zero after {a.zero:g} s)" if a.zero is not None else ")"), flush=True)
    elif a.mode == "agg" and a.target.startswith("running_per_worker="):
        per = float(a.target.split("=", 1)[1])
        print(f"this load's floor (agg): {need_floor(a.load, per, a.max):.0f} % of the fixed run's GPU-seconds for "
              f"ceil(clients / {per:g}) workers following the load at once (no startup, no window)", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--max", type=int, default=4, help="the most workers (and the fixed run's count)")
    ap.add_argument("--clients", type=int, default=16, help="clients at the load's peak")
    ap.add_argument("--low", type=float, default=20.0, help="seconds of 1 client before the load rises")
    ap.add_argument("--high", type=float, default=60.0, help="seconds at the peak (step: the high load; ramp: held)")
    ap.add_argument("--tail", type=float, default=60.0, help="seconds of 1 client at the end")
    ap.add_argument("--rise", type=float, default=120.0, help="ramp: seconds from 1 to --clients")
    ap.add_argument("--fall", type=float, default=None, help="ramp: seconds from --clients to 1 (default --rise)")
    ap.add_argument("--profile", choices=["step", "ramp"], default=None,
                    help="the load (default: today's step, reactive against fixed, waiting_per_worker 1)")
    ap.add_argument("--policies", default=None, help=f"comma-separated, in order, of {','.join(POLICIES)}")
    ap.add_argument("--startup", type=float, default=0.0, help="the mocker's startup_time (a cold start), seconds")
    ap.add_argument("--target", default=None, help="KEY=VALUE per worker (default waiting_per_worker=1, "
                                                   "with --profile running_per_worker=4)")
    ap.add_argument("--window", type=float, default=60.0, help="predictive: forecast_window_seconds")
    ap.add_argument("--down", type=float, default=None, help="scale_down_after_seconds (reactive: 20 by default; "
                                                             "predictive: derived from the startup unless given)")
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
        a.max, a.clients, a.low, a.high, a.tail, a.down, a.rise = 2, 6, 1.0, 6.0, 4.0, a.down or 2.0, 4.0
    a.down_set, a.down = a.down is not None, 20.0 if a.down is None else a.down
    a.legacy = a.profile is None and a.policies is None
    policies = [p for p in (a.policies or ("reactive,fixed" if a.legacy else ",".join(POLICIES))).split(",") if p]
    if unknown := [p for p in policies if p not in POLICIES]:
        raise SystemExit(f"--policies: unknown {unknown}; expected some of {','.join(POLICIES)}")
    a.target = a.target or ("waiting_per_worker=1" if a.profile is None else "running_per_worker=4")
    if a.profile == "ramp":
        a.load = ramp(a.low, a.rise, a.high, a.fall if a.fall is not None else a.rise, a.tail, a.clients)
    else:
        a.load = step(a.low, a.high, a.tail, a.clients, 15.0 + a.startup)
    driver = a.driver or ("slurm" if shutil.which("sbatch") else "local")
    tmp = Path(tempfile.mkdtemp(prefix="autoscale-"))
    (tmp / "manifests").mkdir()
    # an empty recipe stays, so deleting the measured one is not "every manifest gone" (refused)
    (tmp / "manifests" / "keep.yaml").write_text(RECIPE.format(name="keep", workers=0).replace("builtin", "none"))
    skipped = {"planner": planner_reason(tmp, a)} if "planner" in policies else {}
    log = open(tmp / "reconciler.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "reconciler.cli", "run", "--manifests", str(tmp / "manifests"),
                             "--state", str(tmp / "state"), "--driver", driver, "--resync", "2"],
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        rows = []
        for p in policies:
            if p in skipped:
                continue
            print(f"{time.strftime('%H:%M:%S', time.gmtime())} UTC {p} ...", file=sys.stderr, flush=True)
            rows.append(one_run(tmp, driver, a, p))
        report(rows, a, driver, skipped)
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
