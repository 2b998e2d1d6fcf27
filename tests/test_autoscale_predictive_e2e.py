"""reconcile.autoscale.policy: predictive on the real Slurm (issue 49): a mocker whose engine takes
30 s to start, behind the built-in router, under a load that rises one client every 15 s. The
reconciler measures the first worker's launch-to-Ready (state/<recipe>/startup.json), forecasts the
in-flight requests one startup ahead, and asks for a second worker early enough that it is Ready
before the load that needed it arrives.

Every comparison is between timestamps the reconciler recorded: the added worker's launch and
launch-to-Ready (startup.json) against the first decision whose measured in-flight total was
beyond what one worker holds (its target and tolerance): autoscale.json's ``samples`` (the trend's,
predictive only) and each decision's ``last`` look (any policy; polled). With ``policy: reactive``
the worker is only asked for at that decision, so it is Ready a startup after it (the test fails:
checked by hand with the policy flipped)."""

from __future__ import annotations

import calendar
import json
import threading
import time

import pytest

from helpers import wait_until
from support.clients import Client, stop
from support.clusters import deployed
from support.record import events

pytestmark = pytest.mark.slurm

TARGET, TOLERANCE, STARTUP, STEP = 6, 0.1, 30, 15.0
TEXT = f"""\
name: {{name}}
model: {{{{path: m}}}}
resources: {{{{gpus_per_node: 8}}}}
engine: {{{{type: mocker, speedup_ratio: 1, max_num_seqs: 64, startup_time: {STARTUP}}}}}
roles: {{{{agg: {{{{workers: 1, gpus: 1}}}}}}}}
frontend: {{{{type: builtin, args: {{{{poll-interval: 0.2}}}}}}}}
reconcile:
  autoscale:
    policy: predictive
    roles:
      agg: {{{{min: 1, max: 3, target: {{{{running_per_worker: {TARGET}}}}}}}}}
    interval_seconds: 5
    tolerance: {TOLERANCE}
"""


class Ramp(threading.Thread):
    """One more slow client every ``step`` seconds, up to ``most`` (paced by an event's wait, so that
    ``end`` stops it at once); every client stopped by ``end``.

    Each client's requests are long (600 tokens, about 4 s at ``speedup_ratio: 1``): the in-flight
    gauge then reads one per client. With 60-token requests (0.4 s) each client spent a tenth of its
    time or more between requests (or queued a step before running), the 5 s reads swung by one
    to two, and the least-squares slope of 10 of them was off by about its standard error (0.015/s
    of 0.067/s): enough, one run in two or three at CI's load, to move the crossing one client
    (15 s) later than the ramp's own. The forecast is judged on the load's trend, not the gauge's
    swings."""

    def __init__(self, endpoint: str, step: float, most: int):
        super().__init__(daemon=True)
        self.endpoint, self.step, self.most = endpoint, step, most
        self.clients: list = []
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set() and len(self.clients) < self.most:
            c = Client(self.endpoint, limit=5000, max_tokens=600, timeout=60)
            c.start()
            self.clients.append(c)
            self.halt.wait(self.step)

    def end(self) -> None:
        self.halt.set()
        self.join(5)
        stop(*self.clients)


def startup_lives(h, name: str) -> dict[str, dict]:
    """unit -> its last recorded life (launched, readyAfter) from state/<recipe>/startup.json."""
    try:
        doc = json.loads((h.state / name / "startup.json").read_text())
    except (FileNotFoundError, ValueError):
        return {}
    return {x["unit"]: x for x in doc.get("roles", {}).get("agg", [])}


class Looks(threading.Thread):
    """Every decision's last look at the role (autoscale.json's ``last``: when, the in-flight total),
    read twice a second (a decision is made every 5 s)."""

    def __init__(self, path):
        super().__init__(daemon=True)
        self.path, self.seen, self.halt = path, {}, threading.Event()

    def run(self) -> None:
        while not self.halt.wait(0.5):
            try:
                last = json.loads(self.path.read_text())["last"]["agg"]
            except (FileNotFoundError, ValueError, KeyError):
                continue
            i = last.get("inputs") or {}
            if "running" in i:
                at = calendar.timegm(time.strptime(last["at"], "%Y-%m-%dT%H:%M:%SZ"))  # whole seconds: never later
                self.seen[at] = i["running"] + i.get("waiting", 0)


def first_need(h, name: str, looks: Looks) -> float | None:
    """When the reconciler first measured more requests in flight than one worker holds: the first
    such trend sample (kept in autoscale.json for the trend window, predictive) or decision's look."""
    try:
        doc = json.loads((h.state / name / "autoscale.json").read_text())
    except (FileNotFoundError, ValueError):
        return None
    holds = TARGET * (1 + TOLERANCE)
    over = [t for t, _waiting, inflight, _kv in doc["roles"]["agg"].get("samples", []) if inflight > holds]
    over += [t for t, inflight in list(looks.seen.items()) if inflight > holds]
    return min(over, default=None)


def test_a_rising_load_gets_its_worker_ready_before_it_needs_it(tmp_path, summary):
    with deployed(tmp_path, TEXT, "predict", timeout=150) as (h, name, endpoint):
        # the first worker's own launch-to-Ready is measured (the engine's 30 s, and the launch's own)
        first = wait_until(lambda: startup_lives(h, name).get("agg_0"), timeout=60, interval=0.5,
                           what="agg_0's launch-to-Ready in startup.json")
        assert first["readyAfter"] >= STARTUP, first
        ramp, looks = Ramp(endpoint, STEP, most=TARGET + 3), Looks(h.state / name / "autoscale.json")
        looks.start()
        ramp.start()
        try:
            need = wait_until(lambda: first_need(h, name, looks), timeout=STEP * (TARGET + 4), interval=0.5,
                              what=lambda: f"the in-flight load beyond one worker (events: "
                                           f"{[e['message'] for e in events(h, name, 'Scaled')]})")
            added = wait_until(lambda: startup_lives(h, name).get("agg_1"), timeout=90, interval=0.5,
                               what="the added worker agg_1 Ready and recorded")
        finally:
            looks.halt.set()
            ramp.end()
        ready_at = added["launched"] + added["readyAfter"]
        up = [e for e in events(h, name, "Scaled") if e["to"] > e["from"]]
        assert up, events(h, name, "Scaled")
        figures = (f"agg_0 launch-to-Ready {first['readyAfter']}s; scale-up decided at {up[0]['time']}: "
                   f"{up[0]['message']}; agg_1 launched at {added['launched']:.1f}, Ready at {ready_at:.1f} "
                   f"(launch-to-Ready {added['readyAfter']}s); first load beyond one worker at {need:.1f} "
                   f"(Ready {need - ready_at:+.1f}s before it)")
        summary(f"predictive e2e: {figures}")
        # the point of it: Ready (by the reconciler's own record) before the load that needed it came
        assert ready_at < need, figures
        assert added["readyAfter"] >= STARTUP, added
        # the scale-up was the forecast's, made with the measured startup (not the budget's bound)
        assert up[0]["from"] == 1 and up[0]["policy"] == "predictive", up[0]
        assert "forecast running_per_worker" in up[0]["message"], up[0]["message"]
        assert "startup p90" in up[0]["message"] and "measured over" in up[0]["message"], up[0]["message"]
        assert up[0]["startupP90"] >= STARTUP, up[0]
        # and it is shown: describe, get -o wide
        r = h.cli("describe", name)
        assert r.returncode == 0 and "Startup (launch to Ready" in r.stdout and "agg: startup p90" in r.stdout, r.stdout
        wide = h.cli("get", name, "-o", "wide")
        assert wide.returncode == 0 and "STARTUP" in wide.stdout and "agg:" in wide.stdout, wide.stdout
