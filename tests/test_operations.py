"""describe / events / logs / suspend / resume through the CLI, against the real Slurm."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from helpers import free_port, get, wait_until
from harness import Harness, scancel
from support.clients import labelled_metric as _metric
from support.clusters import slurm_h  # noqa: F401 - the fixture h: a harness on the real Slurm

pytestmark = pytest.mark.slurm
TIME_LEFT = re.compile(r"UNLIMITED|(\d+-)?\d{1,2}:\d\d(:\d\d)?")  # squeue's TimeLeft

RECIPE = """\
name: {name}
model: {{path: m}}
resources: {{gpus_per_node: 8}}
engine: {{type: mocker, speedup_ratio: 100}}
roles: {{agg: {{workers: 2, gpus: 1, restart: {{backoff_seconds: 0.5}}}}}}
frontend: {{type: builtin}}
"""


def ops(h: Harness, *args: str, manifests: bool = False) -> subprocess.CompletedProcess:
    where = ["--state", str(h.state)] + (["--manifests", str(h.manifests)] if manifests else [])
    return subprocess.run([sys.executable, "-m", "reconciler.cli", *args, *where], capture_output=True, text=True,
                          timeout=60, cwd=h.tmp, env=h.env)


def test_describe_logs_events_and_a_suspend_that_leaves_everything_running(h):
    name = h.name("ops")
    (h.manifests / f"{name}.yaml").write_text(RECIPE.format(name=name))
    h.start()
    h.wait_ready(name)
    steps = h.steps(name)

    r = h.cli("describe", name, "-o", "json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    units = {u["name"]: u for u in doc["units"]}
    assert set(units) == {"agg_0", "agg_1", "frontend_0"} and all(u["phase"] == "Ready" for u in units.values())
    assert units["agg_1"]["ports"]["http"] and units["agg_1"]["nodes"] == [steps["agg_1"][1]]
    (alloc,) = doc["allocations"]
    # Slurm's own words: UNLIMITED on this partition, though slurmctld may show a job without a time limit
    # as a year from its start for a moment (seen once in a soak: 364-23:59:55)
    assert alloc["job"] in h.jobs(name) and alloc["state"] == "RUNNING" and TIME_LEFT.fullmatch(alloc["timeLeft"])
    assert {"SubmitAlloc", "LaunchStep"} <= {e["kind"] for e in doc["events"]}
    text = h.cli("describe", name)
    assert text.returncode == 0 and "Units:" in text.stdout, text.stdout
    assert re.search(rf"time left ({TIME_LEFT.pattern})\b", text.stdout), text.stdout

    r = ops(h, "logs", name, "agg", "1", "--tail", "3")
    assert r.returncode == 0 and "ready" in r.stdout, r.stdout + r.stderr
    r = ops(h, "logs", name, "decode", "0")
    assert r.returncode == 1 and "units with logs" in r.stderr

    # suspended: a dead worker stays dead, nothing is torn down, get says Suspended
    r = ops(h, "suspend", name, manifests=True)
    assert r.returncode == 0 and "suspended" in r.stdout, r.stderr
    wait_until(lambda: h.get(name)["status"] == "Suspended", timeout=30, what="Suspended")
    doc = json.loads(h.cli("describe", name, "-o", "json").stdout)
    ready = next(c for c in doc["conditions"] if c["type"] == "Ready")
    assert doc["suspended"] and doc["phase"] == "Suspended" and ready["status"] == "True"  # it still serves
    scancel(steps["agg_1"][0])
    wait_until(lambda: "agg_1" not in h.steps(name), timeout=30, what="agg_1 gone")
    h.idle(name, ticks=3)
    now = h.steps(name)
    assert {u: now[u][0] for u in ("agg_0", "frontend_0")} == {u: steps[u][0] for u in ("agg_0", "frontend_0")}
    assert h.jobs(name) == [alloc["job"]]

    r = ops(h, "resume", name, manifests=True)
    assert r.returncode == 0 and "resumed" in r.stdout, r.stderr
    wait_until(lambda: (s := h.steps(name).get("agg_1")) and s[0] != steps["agg_1"][0], timeout=30,
               what="agg_1 relaunched after resume")
    h.wait_ready(name)
    r = ops(h, "logs", name, "agg", "1", "--previous")
    assert r.returncode == 0 and "ready" in r.stdout, r.stdout + r.stderr  # the life before the relaunch

    r = ops(h, "events", name, "--since", "10m", "-o", "json")
    evs = json.loads(r.stdout)
    launches = [e for e in evs if e["kind"] == "LaunchStep" and "agg_1" in e["message"]]
    assert len(launches) == 2, launches  # the first life and the relaunch after resume
    assert ops(h, "events", "--since", "soon").returncode == 1
    assert ops(h, "suspend", "no-such-recipe", manifests=True).returncode == 1


class _Hook(BaseHTTPRequestHandler):
    received: list[dict] = []

    def do_POST(self):  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        type(self).received.append(json.loads(body))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):  # quiet
        pass


def test_metrics_json_logs_and_condition_notifications(h):
    hook = HTTPServer(("127.0.0.1", 0), _Hook)
    _Hook.received = []
    threading.Thread(target=hook.serve_forever, daemon=True).start()
    mport = free_port()
    try:
        name = h.name("obs")
        (h.manifests / f"{name}.yaml").write_text(RECIPE.format(name=name))
        h.start("--metrics-addr", f"127.0.0.1:{mport}", "--notify", f"http://127.0.0.1:{hook.server_port}/hook")
        h.wait_ready(name)

        def scrape() -> str:
            return get(f"http://127.0.0.1:{mport}/metrics", timeout=3)[1].decode()

        # the gauges follow each tick's snapshot: wait for the tick that saw everything Ready
        text = wait_until(lambda: (t := scrape()) and _metric(t, "reconciler_recipes", phase="Ready") == 1
                          and _metric(t, "reconciler_workers", recipe=name, role="frontend", state="ready") == 1
                          and _metric(t, "reconciler_workers", recipe=name, role="agg", state="ready") == 2 and t,
                          timeout=30, what="the metrics of a Ready recipe")
        assert _metric(text, "reconciler_workers", recipe=name, role="agg", state="desired") == 2
        wait_until(lambda: _metric(scrape(), "reconciler_condition", recipe=name, condition="Available") == 1,
                   timeout=30, what="the Available condition's gauge")
        assert _metric(scrape(), "reconciler_condition", recipe=name, condition="Invalid") == 0
        assert _metric(text, "reconciler_actions_total", kind="LaunchStep", outcome="ok") == 3  # 2 workers + router
        assert _metric(text, "reconciler_actions_total", kind="SubmitAlloc", outcome="ok") == 1
        assert _metric(text, "reconciler_slurm_commands_total", verb="squeue", outcome="ok") >= 2
        assert _metric(text, "reconciler_slurm_commands_total", verb="sbatch", outcome="ok") == 1
        assert _metric(text, "reconciler_tick_seconds_count") >= 1
        wait_until(lambda: _metric(scrape(), "reconciler_launch_to_ready_seconds_count", role="agg") == 2,
                   timeout=30, what="two launch-to-Ready observations")
        # each role's measured startup (state/<recipe>/startup.json), p50 and p90 of its lives
        wait_until(lambda: (_metric(scrape(), "reconciler_startup_seconds", recipe=name, role="agg", quantile="0.9",
                                    source="measured") or 0) > 0, timeout=30, what="the agg role's measured startup")

        avail = wait_until(lambda: [e for e in _Hook.received if e["recipe"] == name and e["kind"] == "Condition"
                                    and e["message"].startswith("Available=True")], timeout=30,
                           what="an Available=True POST")
        assert avail[0]["reason"] == "MinimumWorkersAvailable" and avail[0]["condition"] == "Available"
        # only Available is posted: Ready and Progressing move with every planned change
        assert {e["condition"] for e in _Hook.received if e["recipe"] == name} == {"Available"}, _Hook.received
        # not a TTY: the reconciler's log is JSON lines
        lines = [l for l in h.log().splitlines() if l.strip()]
        assert lines and all(json.loads(l)["event"] for l in lines[:5]), lines[:5]
    finally:
        hook.shutdown()


def test_a_lost_allocation_is_replaced_and_the_status_says_why(h):
    name = h.name("lost")
    (h.manifests / f"{name}.yaml").write_text(RECIPE.format(name=name))
    h.start()
    h.wait_ready(name)
    (job,) = h.jobs(name)
    scancel(job)
    wait_until(lambda: (j := h.jobs(name)) and job not in j, timeout=30, what="a new allocation submitted")
    h.wait_ready(name, timeout=60)
    ev = [json.loads(l) for l in (h.state / "events.jsonl").read_text().splitlines()]
    (lost,) = [e for e in ev if e["kind"] == "AllocationLost" and e["recipe"] == name]
    assert lost["job"] == job and lost["state"] == "CANCELLED", lost  # from slurmctld, not guessed
    st = json.loads((h.state / name / "status.json").read_text())
    assert st["lastAllocationLost"]["job"] == job and "CANCELLED" in st["lastAllocationLost"]["message"]
    text = h.cli("describe", name).stdout
    assert f"last lost: allocation 0 (job {job}) ended: CANCELLED" in text, text
