"""aiperf against each serving stack the reconciler deploys on a real Slurm, in one run.

    python benchmarks/stacks.py [--requests 40] [--concurrency 1,4,16] [--stacks builtin,dynamo,sglang-router]
    python benchmarks/stacks.py --smoke      # its smallest size (builtin stack, 2 requests, concurrency 1): CI runs it

Its table is docs/performance.md, section "Serving stacks (benchmarks/stacks.py)".

Stacks: built-in router + built-in mocker; dynamo.frontend + dynamo.mocker (with etcd);
sglang-router + built-in mocker. For each: drop the recipe into a scratch manifests
directory watched by `reconciler run`, time until the first chat completion succeeds
through the endpoint `get` reports, then run aiperf 0.13 (its own venv, .stacks/aiperf)
at each concurrency with ISL 128, OSL 64, streaming, and the model's tokenizer (a tiny
generated one). Prints one table; asserts nothing. Needs scripts/stacks-install.sh and
scripts/slurm-dev.sh up.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from reconciler.mocker.model_dir import make_model_dir  # noqa: E402

AIPERF = ROOT / ".stacks" / "aiperf" / "bin" / "aiperf"
DYNAMO_PY = ROOT / ".stacks" / "dynamo" / "bin" / "python"
BASE = """\
name: {name}
model: {{path: {model}}}
resources: {{gpus_per_node: 8}}
engine: {{type: mocker, speedup_ratio: 1}}
roles: {{agg: {{workers: 1, gpus: 1}}}}
frontend: {{type: {frontend}}}
reconcile:
  engine_python: {python}
"""
STACKS = [  # (label, frontend type, engine python)
    ("builtin router + builtin mocker", "builtin", sys.executable),
    ("dynamo.frontend + dynamo.mocker", "dynamo", str(DYNAMO_PY)),
    ("sglang-router + builtin mocker", "sglang-router", sys.executable),
]


def post_ok(url: str, model: str) -> bool:
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}).encode()
    req = urllib.request.Request(url + "/v1/chat/completions", body, {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status == 200
    except OSError:
        return False


def model_id(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url + "/v1/models", timeout=3) as r:
            data = json.loads(r.read()).get("data", [])
            return data[0]["id"] if data else None
    except (OSError, ValueError):
        return None


def endpoint(state: Path, name: str) -> str | None:
    try:
        return json.loads((state / name / "status.json").read_text()).get("endpoint")
    except (FileNotFoundError, ValueError):
        return None


def aiperf(url: str, model: str, tokenizer: Path, conc: int, requests: int, out: Path, isl: int = 128,
           osl: int = 64) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}  # it rejects a local tokenizer path
    env["TMPDIR"] = str(out)
    cmd = [str(AIPERF), "profile", "--model", model, "--url", url, "--endpoint-type", "chat", "--streaming",
           "--tokenizer", str(tokenizer), "--concurrency", str(conc), "--request-count", str(requests),
           "--isl", str(isl), "--osl", str(osl), "--ui-type", "none", "--artifact-dir", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    found = list(out.rglob("profile_export_aiperf.json"))
    if r.returncode != 0 or not found:
        raise SystemExit(f"aiperf failed ({r.returncode}): {r.stderr[-2000:] or r.stdout[-2000:]}")
    return json.loads(found[0].read_text())


def pick(doc: dict, key: str, stat: str) -> float | None:
    v = doc.get(key)
    if isinstance(v, dict):
        return v.get(stat)
    for section in doc.values():  # some versions nest the records
        if isinstance(section, dict) and isinstance(section.get(key), dict):
            return section[key].get(stat)
    return None


def fmt(v: float | None, nd: int = 1) -> str:
    return "-" if v is None else f"{v:.{nd}f}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=40, help="aiperf requests per concurrency")
    ap.add_argument("--concurrency", default="1,4,16")
    ap.add_argument("--stacks", default=",".join(s[1] for s in STACKS), help="frontend types of the stacks to run")
    ap.add_argument("--smoke", action="store_true", help="the smallest size (the builtin stack, 2 requests at concurrency 1): that it runs")
    a = ap.parse_args()
    if a.smoke:  # aiperf's own start-up (~20 s) is most of a run: one stack
        a.requests, a.concurrency, a.stacks = 2, "1", "builtin"
    chosen = a.stacks.split(",")
    if unknown := set(chosen) - {s[1] for s in STACKS}:
        raise SystemExit(f"--stacks: unknown {sorted(unknown)}; known: {[s[1] for s in STACKS]}")
    for need in (AIPERF, DYNAMO_PY):
        if not need.exists():
            raise SystemExit(f"missing {need}: run scripts/stacks-install.sh")
    tmp = Path(tempfile.mkdtemp(prefix="bench-stacks-"))
    model = make_model_dir(tmp / "tiny")
    (tmp / "manifests").mkdir()
    # a suspended recipe (it runs nothing): deleting a stack's file is then not "every manifest gone at once"
    (tmp / "manifests" / "parked.yaml").write_text(BASE.format(name="parked", model=model, frontend="none",
                                                               python=sys.executable) + "  suspend: true\n")
    (tmp / "home").mkdir()
    env = {**os.environ, "HOME": str(tmp / "home"), "TMPDIR": str(tmp), "HF_HUB_OFFLINE": "1",
           "RECONCILER_PORT_RANGE": os.environ.get("RECONCILER_PORT_RANGE", "31800-32200")}  # clear of the tests, below 32768 (Dynamo)
    log = open(tmp / "reconciler.log", "ab")
    proc = subprocess.Popen([sys.executable, "-m", "reconciler.cli", "run", "--manifests", str(tmp / "manifests"),
                             "--state", str(tmp / "state"), "--resync", "1"], stdout=log, stderr=subprocess.STDOUT,
                            cwd=tmp, env=env)
    rows = []
    try:
        for i, (label, frontend, python) in enumerate(STACKS):
            if frontend not in chosen:
                continue
            name = f"bench-stack-{i}"
            f = tmp / "manifests" / f"{name}.yaml"
            t0 = time.monotonic()
            f.write_text(BASE.format(name=name, model=model, frontend=frontend, python=python))
            print(f"[{label}] deploying ...", flush=True)
            while True:
                url = endpoint(tmp / "state", name)
                # Dynamo serves the model under its path; the others under the recipe's served name
                mid = (model_id(url) if frontend == "dynamo" else model.name) if url else None
                if mid and post_ok(url, mid):
                    break
                if time.monotonic() - t0 > 180:
                    raise SystemExit(f"{label}: no successful request within 180 s (see {tmp}/reconciler.log)")
                time.sleep(0.1)
            first = time.monotonic() - t0
            print(f"[{label}] first successful request {first:.1f} s after the file drop", flush=True)
            for c in map(int, a.concurrency.split(",")):
                out = tmp / f"aiperf-{i}-{c}"
                out.mkdir()
                doc = aiperf(url, mid, model, c, a.requests, out)
                rows.append((label, c, pick(doc, "request_throughput", "avg"),
                             pick(doc, "output_token_throughput", "avg"),
                             pick(doc, "time_to_first_token", "p50"), pick(doc, "time_to_first_token", "p99"),
                             pick(doc, "inter_token_latency", "p50"), pick(doc, "inter_token_latency", "p99"),
                             sum(e.get("count", 1) for e in doc.get("error_summary") or []), first))
            f.unlink()
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and model_id(url) is not None:  # its frontend goes with it
                time.sleep(0.2)
    finally:
        proc.terminate()
        proc.wait(30)
        # the reconciler leaves workloads running when it stops: tear down what this run deployed
        for f in (tmp / "manifests").glob("*.yaml"):
            f.unlink()
        subprocess.run([sys.executable, "-m", "reconciler.cli", "run", "--once", "--allow-empty", "--manifests",
                        str(tmp / "manifests"), "--state", str(tmp / "state")], cwd=tmp, env=env,
                       capture_output=True, timeout=120)
    head = ("stack", "conc", "req/s", "out tok/s", "TTFT p50 ms", "TTFT p99 ms", "ITL p50 ms", "ITL p99 ms",
            "failed", "drop→first ok s")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {fmt(r[2], 2)} | {fmt(r[3])} | {fmt(r[4])} | {fmt(r[5])} | {fmt(r[6], 2)} | "
              f"{fmt(r[7], 2)} | {int(r[8])} | {r[9]:.1f} |")
    print(f"(scratch and logs: {tmp})")


if __name__ == "__main__":
    main()
