"""Service continuity under faults (issue 27): a client loop through the gateway while a fault hits.

    python benchmarks/continuity.py [--smoke] [--faults frontend2,frontend1,etcd,handover,ratio,controller]

Each fault runs on the local Slurm (scripts/slurm-dev.sh up) with real programs: `reconciler run`,
Debian's nginx as the gateway, the built-in router or NVIDIA Dynamo 1.6.1 (frontend + mocker) with
Debian's etcd (scripts/stacks-install.sh). A client thread sends small chat completions back to
back through the endpoint `get` prints; per fault it prints requests sent and failed (from the
kill on), the longest time without a successful answer, how long until requests succeed again,
and how long until the recipe is Ready again (state/<recipe>/status.json). Prints figures; asserts
nothing. ``--smoke``: one trial of the 2-frontend kill and of the etcd kill.
Table: docs/performance.md, section "Service continuity (benchmarks/continuity.py)".

Two Dynamo frontends need a job of three nodes (srtctl's rule: one frontend per node other
than the head, one on a one-node job); the local Slurm has one node, so the 2-frontend rows run
the built-in stack only. ``handover``: the Dynamo stack with a 1-minute limit, moved whole to
a successor allocation under traffic (its "Ready again" column: from the traffic's start to the
old job gone). ``controller``: slurmctld restarted with fresh state (every job and step
forgotten), on a Slurm of the benchmark's own (tests/private_slurm.py; the dev Slurm is shared),
built-in stack; its "Ready again" is from the restart's start.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from benchmarks.traffic import Traffic  # noqa: E402
from harness import Harness, scancel  # noqa: E402

BUILTIN = """\
schema: 2
name: {name}
model: {{path: m}}
resources: {{gpus_per_node: 8}}
engine: {{type: mocker, speedup_ratio: 100}}
roles: {{agg: {{workers: 1, gpus: 1}}}}
frontend: {{type: builtin, enable_multiple_frontends: {multi}, num_additional_frontends: {extra}}}
"""
DYNAMO_RECIPE = "srt-slurm-v2/mocker/dynamo-agg.yaml"
CORPUS = Path(os.environ.get("RECONCILER_CORPUS", ROOT.parent / "shared" / "corpus"))


def wait(fn, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = fn()
        if v:
            return v
        time.sleep(0.1)
    raise TimeoutError(what)


def phase(h: Harness, name: str) -> str:
    try:
        return json.loads((h.state / name / "status.json").read_text()).get("phase", "")
    except (OSError, ValueError):
        return ""


def served(url: str) -> str | None:
    import urllib.request

    try:
        with urllib.request.urlopen(url + "/v1/models", timeout=3) as r:
            data = json.loads(r.read()).get("data", [])
        return data[0]["id"] if data else None
    except (OSError, ValueError):
        return None


def dynamo_config(h: Harness, tmp: Path) -> None:
    """The cluster config the stack tests use: host mode, the tiny tokenizer as the model."""
    from reconciler.mocker.model_dir import make_model_dir

    model = make_model_dir(tmp / "models" / "tiny")
    scratch = tmp / "scratch"
    (scratch / "home").mkdir(parents=True)
    (scratch / "tmp").mkdir()
    doc = {"model_paths": {"hf:Qwen/Qwen3-0.6B": str(model), "qwen3-0.6b": str(model)},
           "containers": {"dynamo-sglang": "unused.sqsh", "sglang": "unused.sqsh"},
           "host_runtime": {"python": str(ROOT / ".stacks" / "dynamo" / "bin" / "python"), "env": {
               "HOME": str(scratch / "home"), "TMPDIR": str(scratch / "tmp"), "HF_HUB_OFFLINE": "1"}}}
    (tmp / "srtslurm.yaml").write_text(json.dumps(doc))


def deploy(tmp: Path, stack: str, frontends: int, limited: bool = False) -> tuple[Harness, str, str, str | None]:
    """``limited``: a 1-minute time limit, handed over at 40 s left (a successor every ~20-30 s)."""
    h = Harness(tmp, "slurm")
    if stack == "builtin":
        name = h.name("cont")
        text = BUILTIN.format(name=name, multi=str(frontends > 1).lower(), extra=frontends - 1)
    else:
        dynamo_config(h, tmp)
        text = (CORPUS / DYNAMO_RECIPE).read_text()
        name = next(l.split(":", 1)[1].strip().strip('"') for l in text.splitlines() if l.startswith("name:"))
        h.names.append(name)
        text = text.replace("enable_multiple_frontends: false",
                            f"enable_multiple_frontends: {str(frontends > 1).lower()}\n"
                            f"  num_additional_frontends: {frontends - 1}")
    if limited:
        text = text.replace('time_limit: "00:15:00"', 'time_limit: "00:01:00"') + (
            "\nreconcile: {handover_seconds: 40, rollout: {pickup_seconds: 1, drain_seconds: 1}}\n")
    (h.manifests / f"{name}.yaml").write_text(text)
    h.start()
    want = {f"frontend_{i}" for i in range(frontends)} | {"agg_0"} | ({"svc-etcd_0"} if stack == "dynamo" else set())
    wait(lambda: set(h.steps(name)) == want, 120, f"steps {sorted(want)}")
    wait(lambda: phase(h, name) == "Ready", 120, "Ready")
    endpoint = h.get(name)["endpoint"]
    model = wait(lambda: served(endpoint), 60, "the model listed") if stack == "dynamo" else None
    return h, name, endpoint, model


class Phases:
    """state/<recipe>/status.json's phase, sampled every 50 ms: was the recipe Ready when a request failed?"""

    def __init__(self, h: Harness, name: str):
        import threading

        self.samples: list[tuple[float, str]] = []
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, args=(h, name), daemon=True)
        self._t.start()

    def _run(self, h: Harness, name: str) -> None:
        while not self._stop.wait(0.05):
            self.samples.append((time.monotonic(), phase(h, name)))

    def at(self, t: float) -> str:
        before = [p for at, p in self.samples if at <= t]
        return before[-1] if before else ""

    def stop(self) -> None:
        self._stop.set()
        self._t.join(5)


def fault(stack: str, frontends: int, victim: str, tmp: Path) -> dict:
    h, name, endpoint, model = deploy(tmp, stack, frontends)
    try:
        phases = Phases(h, name)
        traffic = Traffic(endpoint, model=model).start()
        wait(lambda: traffic.wait_ok(time.monotonic(), 30), 35, "served before the fault")
        time.sleep(1.0)
        before = h.steps(name)
        killed = time.monotonic()
        scancel(before[victim][0])
        wait(lambda: h.steps(name).get(victim, before[victim]) != before[victim], 60, f"{victim} relaunched")
        # Ready again: the first Ready status after the kill that follows a non-Ready one (or none)
        not_ready_seen = False
        ready_at = None
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            p = phase(h, name)
            if p != "Ready":
                not_ready_seen = True
            elif not_ready_seen or time.monotonic() - killed > 10:
                ready_at = time.monotonic()
                break
            time.sleep(0.05)
        # serving again: answers flowing for a second after the last failure or held request
        wait(lambda: (b := traffic.recovered(killed)) is not None and time.monotonic() - b > 1.0, 60,
             "answers flowing again")
        traffic.stop()
        phases.stop()
        end = time.monotonic()
        after = [o for o in traffic.outcomes if o.at >= killed]
        failed = [o for o in after if not o.ok]
        # failures while the recipe said Ready, not counting the first second (one probe interval)
        ready_failing = sum(1 for o in failed if o.at - killed > 1.0 and phases.at(o.at) == "Ready")
        gap, back = _longest_gap(traffic, killed, end)
        whys = Counter(f"{o.code} {o.detail[:80]}" for o in failed).most_common(2)
        return {"fault": f"{victim} killed", "stack": stack, "frontends": frontends, "sent": len(after),
                "failed": len(failed), "gap": gap, "failures": whys,
                "serving_again": max(0.0, back - killed),
                "ready_again": (ready_at - killed) if ready_at else None, "not_ready_seen": not_ready_seen,
                "failed_while_ready": ready_failing}
    finally:
        h.cleanup()


def _longest_gap(traffic: Traffic, start: float, end: float) -> tuple[float, float]:
    """(the longest time without a successful answer in [start, end], the answer that ended it):
    a held request ends it when it is answered, a failure does not."""
    oks = sorted(o.at for o in traffic.outcomes if o.ok and start <= o.at <= end)
    points = [start, *oks]
    best = max(zip(points, points[1:]), key=lambda p: p[1] - p[0], default=(start, start))
    return best[1] - best[0], best[1]


def handover(stack: str, tmp: Path) -> dict:
    """The whole stack moved to a successor allocation before its 1-minute limit, under traffic."""
    h, name, endpoint, model = deploy(tmp, stack, 1, limited=True)
    try:
        (first,) = h.jobs(name)
        traffic = Traffic(endpoint, model=model).start()
        wait(lambda: traffic.wait_ok(time.monotonic(), 30), 35, "served before the hand-over")
        start = time.monotonic()
        wait(lambda: (jobs := h.jobs(name)) and first not in jobs
             and {s[0].split(".")[0] for s in h.steps(name).values()} == set(jobs), 120, "the stack handed over")
        moved = time.monotonic()
        n = len(traffic.outcomes)
        wait(lambda: sum(o.ok for o in traffic.outcomes[n:]) >= 20, 30, "served after it")
        traffic.stop()
        after = [o for o in traffic.outcomes if o.at >= start]
        return {"fault": "hand-over before the time limit", "stack": stack, "frontends": 1, "sent": len(after),
                "failed": sum(1 for o in after if not o.ok), "gap": traffic.longest_gap(start, time.monotonic()),
                "serving_again": 0.0, "ready_again": moved - start, "not_ready_seen": False,
                "failed_while_ready": 0}
    finally:
        h.cleanup()


def controller(stack: str, tmp: Path) -> dict:
    """slurmctld restarted with fresh state (every job and step forgotten, job ids from 1 again),
    on a Slurm of its own (tests/private_slurm.py: the dev Slurm is shared)."""
    from private_slurm import PrivateSlurm, available

    why = available()
    if why:
        return {"fault": "Slurm controller restarted with fresh state", "skipped": why}
    slurm = PrivateSlurm(tmp / "slurm")
    slurm.start()
    before = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(slurm.conf)  # the harness's squeue and the reconciler's
    try:
        h, name, endpoint, _ = deploy(tmp, stack, 1)
        try:
            traffic = Traffic(endpoint).start()
            wait(lambda: traffic.wait_ok(time.monotonic(), 30), 35, "served before the fault")
            start = time.monotonic()
            slurm.restart_fresh()
            # the lost steps seen by the client: a request failed, or none answered for a second (held)
            wait(lambda: traffic.recovered(start) is None, 60, "the lost steps seen by the client")
            # serving again: answers flowing for 2 s after the last failure or held request
            back = wait(lambda: (b := traffic.recovered(start)) is not None and b > start
                        and time.monotonic() - b > 2.0 and b, 180, "serving again")
            ready_at = wait(lambda: phase(h, name) == "Ready" and time.monotonic(), 60, "Ready again")
            same = h.get(name)["endpoint"] == endpoint
            traffic.stop()
            after = [o for o in traffic.outcomes if o.at >= start]
            return {"fault": "Slurm controller restarted with fresh state" + ("" if same else " (NEW ENDPOINT)"),
                    "stack": stack, "frontends": 1, "sent": len(after), "failed": sum(not o.ok for o in after),
                    "gap": traffic.longest_gap(start, back), "serving_again": back - start,
                    "ready_again": ready_at - start, "not_ready_seen": True,
                    "failed_while_ready": 0}
        finally:
            h.cleanup()
    finally:
        if before is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = before
        slurm.down()


def ratio(stack: str, smoke: bool, tmp: Path) -> dict:
    """aiperf at concurrency 64 (8 with --smoke) through the gateway: 2 frontends vs 1."""
    aiperf = ROOT / ".stacks" / "aiperf" / "bin" / "aiperf"
    if not aiperf.exists():
        return {"fault": "2 frontends vs 1 (aiperf)", "skipped": "no .stacks/aiperf (scripts/stacks-install.sh)"}
    conc, count = (8, 80) if smoke else (64, 640)
    out = {}
    for n in (1, 2):
        (tmp / f"r{n}").mkdir()
        h, name, endpoint, model = deploy(tmp / f"r{n}", stack, n)
        try:
            art = tmp / f"aiperf{n}"
            env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"} | {"TMPDIR": str(tmp)}
            if model:
                tok = ["--tokenizer", model]
            else:  # the built-in mocker: any tokenizer (it emits the model directory's tokens when it has one)
                from reconciler.mocker.model_dir import make_model_dir

                tok = ["--tokenizer", str(make_model_dir(tmp / f"tok{n}"))]
            r = subprocess.run([str(aiperf), "profile", "--model", model or "m", "--url", endpoint,
                                "--endpoint-type", "chat", "--streaming", *tok, "--concurrency", str(conc),
                                "--request-count", str(count), "--isl", "64", "--osl", "16", "--ui-type", "none",
                                "--artifact-dir", str(art)], capture_output=True, text=True, timeout=600, env=env)
            files = list(art.rglob("profile_export_aiperf.json"))
            if r.returncode != 0 or not files:
                out[n] = None
                print(f"aiperf ({n} frontend(s)) failed: {r.stderr[-400:]}", file=sys.stderr)
                continue
            doc = json.loads(files[0].read_text())
            out[n] = doc["request_throughput"]["avg"]
        finally:
            h.cleanup()
    got = out.get(2) / out[1] if out.get(1) and out.get(2) else None
    return {"fault": f"2 frontends vs 1 at concurrency {conc} (aiperf)", "stack": stack, "rps1": out.get(1),
            "rps2": out.get(2), "ratio": got}


def table(rows: list[dict]) -> str:
    lines = ["| fault | stack | frontends | sent | failed | longest gap | serving again | Ready again | "
             "failed while Ready (after 1 s) |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "skipped" in r:
            lines.append(f"| {r['fault']} | | | | | | | | not run: {r['skipped']} |")
        elif "ratio" in r:
            fmt = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
            lines.append(f"| {r['fault']} | {r['stack']} | 1 / 2 | | | | | | req/s {fmt(r['rps1'])} / "
                         f"{fmt(r['rps2'])}, ratio {fmt(r['ratio'])} |")
        else:
            ready = ("stayed Ready" if not r["not_ready_seen"] else "-" if r["ready_again"] is None
                     else f"{r['ready_again']:.1f} s")
            lines.append(f"| {r['fault']} | {r['stack']} | {r['frontends']} | {r['sent']} | {r['failed']} | "
                         f"{r['gap']:.2f} s | {r['serving_again']:.1f} s | {ready} | {r['failed_while_ready']} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--smoke", action="store_true", help="one trial per fault, small aiperf run")
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--faults", default=None, help="default frontend2,frontend1,etcd,handover,ratio,controller "
                    "(--smoke: frontend2,etcd)")
    ap.add_argument("--stacks", default="builtin,dynamo")
    a = ap.parse_args()
    trials = 1 if a.smoke else a.trials
    faults = a.faults or ("frontend2,etcd" if a.smoke else "frontend2,frontend1,etcd,handover,ratio,controller")
    os.environ.setdefault("RECONCILER_TEST_PORTS", "32400-32600")
    have_dynamo = (ROOT / ".stacks" / "dynamo" / "bin" / "python").exists() and shutil.which("etcd")
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="continuity-") as d:
        tmp = Path(d)
        k = 0
        for f in faults.split(","):
            for stack in a.stacks.split(","):
                if stack == "dynamo" and not have_dynamo:
                    continue
                if f in ("etcd", "handover") and stack != "dynamo":
                    continue  # the built-in stack's hand-over: tests/test_handover_e2e.py
                if f == "controller" and stack != "builtin":
                    continue  # the private Slurm has no Dynamo cluster config: the built-in stack
                if f in ("frontend2", "ratio") and stack == "dynamo":
                    # srtctl's rule: one Dynamo frontend on a one-node job (several need 3+ nodes)
                    rows.append({"fault": f, "skipped": "dynamo: one frontend on a one-node job (srtctl's rule)"})
                    continue
                for _ in range(trials if f != "ratio" else 1):
                    k += 1
                    where = tmp / f"run{k}"
                    where.mkdir()
                    if f == "frontend2":
                        rows.append(fault(stack, 2, "frontend_0", where))
                    elif f == "frontend1":
                        rows.append(fault(stack, 1, "frontend_0", where))
                    elif f == "etcd":
                        rows.append(fault(stack, 1, "svc-etcd_0", where))
                    elif f == "handover":
                        rows.append(handover(stack, where))
                    elif f == "ratio":
                        rows.append(ratio(stack, a.smoke, where))
                    elif f == "controller":
                        rows.append(controller(stack, where))
                    print(json.dumps(rows[-1]), file=sys.stderr)
    print(table(rows))


if __name__ == "__main__":
    main()
