"""Engines that load for a minute, on the real Slurm: nothing is killed, relaunched or marked
failed while a life loads within its recipe's health-check budget.

The mocker's ``startup_time`` (60 s here) holds /health at 503 as a real engine's load does
(a real vLLM took 96-300 s on this machine); the budget is 12 x 10 s = 120 s. One deployment of
two workers behind the built-in router and the gateway carries three scenarios in order (each
cold start costs a minute, so they share it): the first start, a killed worker's relaunch, and a
rolling update of an engine flag whose new lives load beside the old ones. What the reconciler
did is read from its own record (state/events.jsonl, launches.json, status.json), what clients
saw from a request loop through the gateway. docs/operations.md, "Slow starts", lists every timer.
"""

from __future__ import annotations

import calendar
import http.client
import json
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from harness import Harness, scancel
from helpers import wait_until

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(600)]

STARTUP = 60.0  # seconds each life of the mocker answers /health 503 before it is Ready
TEXT = """\
name: {name}
model: {{path: m}}
resources: {{gpus_per_node: 8}}
engine: {{type: mocker, speedup_ratio: {speed}, startup_time: {startup:g}}}
roles: {{agg: {{workers: 2, gpus: 1}}}}
frontend: {{type: builtin, args: {{poll-interval: 0.2}}}}
health_check: {{max_attempts: 12, interval_seconds: 10}}
reconcile: {{rollout: {{max_surge: 2, max_unavailable: 0, pickup_seconds: 1, drain_seconds: 1}}}}
"""
LOAD = STARTUP + 60  # a wait that covers one load and the machine being busy


class Loop(threading.Thread):
    """Chat completions through the gateway, one at a time, a pause between two (bounded: a
    few thousand at most). Every answer that is not a 200 is a failure, kept with its text and
    when it came (``failed_at``, time.monotonic())."""

    def __init__(self, endpoint: str) -> None:
        super().__init__(daemon=True)
        u = urlsplit(endpoint)
        self.host, self.port = u.hostname, u.port
        self.ok = 0
        self.failed: list[str] = []
        self.failed_at: list[float] = []
        self.halt = threading.Event()

    def run(self) -> None:
        body = json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}).encode()
        while not self.halt.is_set() and self.ok + len(self.failed) < 20000:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
            try:
                conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
                r = conn.getresponse()
                data = r.read()
                if r.status == 200:
                    self.ok += 1
                else:
                    self._fail(f"{r.status}: {data[:200]!r}")
            except (OSError, http.client.HTTPException) as e:
                self._fail(f"{type(e).__name__}: {e}")
            finally:
                conn.close()
            self.halt.wait(0.05)

    def _fail(self, what: str) -> None:
        self.failed.append(what)
        self.failed_at.append(time.monotonic())

    def stop(self) -> None:
        self.halt.set()
        self.join(60)


def status(h: Harness, name: str) -> dict:
    return json.loads((h.state / name / "status.json").read_text())


def launches(h: Harness, name: str) -> dict:
    return json.loads((h.state / name / "launches.json").read_text())


def events(h: Harness, name: str, since: int = 0) -> list[dict]:
    """The recipe's events from line ``since`` of state/events.jsonl on, each with its line number."""
    lines = (h.state / "events.jsonl").read_text().splitlines()
    out = []
    for n, line in enumerate(lines[since:], since):
        e = json.loads(line)
        if e["recipe"] == name:
            out.append({**e, "line": n, "at": calendar.timegm(time.strptime(e["time"], "%Y-%m-%dT%H:%M:%SZ"))})
    return out


def mark(h: Harness) -> int:
    return len((h.state / "events.jsonl").read_text().splitlines())


def acts(evs: list[dict], name: str, unit: str) -> list[tuple[str, str]]:
    """(kind, message) of every launch and cancel of ``unit`` (its both life slots)."""
    return [(e["kind"], e["message"]) for e in mine(evs, name, unit)]


def mine(evs: list[dict], name: str, unit: str) -> list[dict]:
    """``unit``'s launch ("launch NAME/UNIT on ...") and cancel ("(NAME/UNIT: why)") events."""
    return [e for e in evs if (e["kind"] == "LaunchStep" and f"launch {name}/{unit} " in e["message"])
            or (e["kind"] == "CancelStep" and f"({name}/{unit}:" in e["message"])]


# what status.json says of a life judged failed (shell/reasons.py); a relaunched life's row may
# still name how the life before it ended (Killed: the test's scancel), which is no mark on it
JUDGED = {"StartupTimeout", "Unhealthy", "CrashLoopBackOff", "FatalLogLine"}


def watch_loading(h: Harness, name: str, until: float, seen: list[dict]) -> None:
    """While lives load: every worker row of status.json is Starting or Ready, never Failed or
    BackOff, never given a reason that judges a life failed (sampled every second; kept in
    ``seen`` for the message)."""
    while time.monotonic() < until:
        try:
            rows = [w for w in status(h, name)["workers"] if w["role"] == "agg"]
        except (OSError, ValueError, KeyError):
            time.sleep(1)
            continue
        seen.append({w["name"]: (w["phase"], w.get("reason")) for w in rows})
        for w in rows:
            assert w["phase"] not in ("Failed", "BackOff") and w.get("reason") not in JUDGED, seen[-3:]
        if rows and all(w["phase"] == "Ready" for w in rows):
            return
        time.sleep(1)


def ready_after(h: Harness, name: str, unit: str) -> float:
    """The unit's current life's launch-to-Ready, as the reconciler recorded it (launches.json). It
    is written in the pass that records the status, after status.json: waited for, not read once."""
    return wait_until(lambda: launches(h, name)[unit].get("readyAfter"), timeout=30, interval=0.5,
                      what=lambda: f"{unit}'s readyAfter in launches.json: {launches(h, name).get(unit)}")


def ready(h: Harness, name: str) -> dict | bool:
    st = status(h, name)
    return st["phase"] == "Ready" and st


@pytest.fixture
def dep(tmp_path):
    h = Harness(tmp_path, "slurm")
    try:
        yield h
    finally:
        h.cleanup()


def test_slow_starts_first_start_relaunch_and_rolling_update(dep, summary):
    h = dep
    name = h.name("slow")
    f = h.manifests / f"{name}.yaml"
    f.write_text(TEXT.format(name=name, speed=100, startup=STARTUP))
    h.start()
    first_start(h, name)
    endpoint = status(h, name)["endpoint"]
    killed_worker(h, name, endpoint)
    rolling_update(h, name, f, endpoint, summary)


def first_start(h: Harness, name: str) -> None:
    """Drop -> Ready: each worker launched once, loading a minute, never stopped or marked failed."""
    wait_until(lambda: set(h.steps(name)) >= {"agg_0", "agg_1"}, timeout=60, interval=1, what="both workers launched")
    seen: list[dict] = []
    watch_loading(h, name, time.monotonic() + LOAD, seen)
    wait_until(lambda: ready(h, name), timeout=LOAD, interval=1, what=lambda: f"{name} Ready ({h.log()[-2000:]})")
    evs = events(h, name)
    for unit in ("agg_0", "agg_1"):
        assert [k for k, _ in acts(evs, name, unit)] == ["LaunchStep"], acts(evs, name, unit)
        took = ready_after(h, name, unit)
        rec = launches(h, name)[unit]
        assert rec["launches"] == 1 and rec.get("restarts", 0) == 0, rec
        assert took >= STARTUP, rec  # it did load for the minute
    assert any(s.get("agg_0", ("",))[0] == "Starting" for s in seen), seen[:3]
    assert all(r is None for s in seen for _, r in s.values()), seen  # a first start has no reason at all


def killed_worker(h: Harness, name: str, endpoint: str) -> None:
    """agg_1 killed: relaunched at once (the first restart has no backoff), loads a minute beside
    agg_0, which serves every request meanwhile (the kill may cut a request agg_1 was answering:
    only those, within seconds of it, may fail); no second relaunch while it loads."""
    since = mark(h)
    step = h.steps(name)["agg_1"][0]
    loop = Loop(endpoint)
    loop.start()
    try:
        scancel(step)
        killed = time.monotonic()
        wait_until(lambda: (s := h.steps(name).get("agg_1")) and s[0] != step, timeout=60, interval=0.5,
                   what="agg_1 relaunched")
        seen: list[dict] = []
        watch_loading(h, name, time.monotonic() + LOAD, seen)
        wait_until(lambda: ready(h, name), timeout=LOAD, interval=1, what=f"{name} Ready again")
        during = loop.ok
    finally:
        loop.stop()
    late = [(round(t - killed, 1), what) for t, what in zip(loop.failed_at, loop.failed) if t - killed > 10]
    assert late == [] and len(loop.failed) <= 2 and during > 0, (loop.ok, loop.failed[:5], late[:5])
    evs = events(h, name, since)
    assert [k for k, _ in acts(evs, name, "agg_1")] == ["LaunchStep"], acts(evs, name, "agg_1")
    assert acts(evs, name, "agg_0") == [], acts(evs, name, "agg_0")
    took = ready_after(h, name, "agg_1")
    rec = launches(h, name)["agg_1"]
    assert rec["launches"] == 2 and rec["restarts"] == 1, rec
    assert took >= STARTUP, rec  # the relaunched life loaded for the minute too


def rolling_update(h: Harness, name: str, f: Path, endpoint: str, summary) -> None:
    """An engine flag changes: both new lives load a minute beside the old ones (max_surge 2);
    the old ones serve until their successors are Ready and routed; no request fails."""
    since = mark(h)
    before = {u: sid for u, _, sid in h.lives(name) if u.startswith("agg_")}
    loop = Loop(endpoint)
    loop.start()
    try:
        wait_until(lambda: loop.ok >= 3, timeout=30, what="answers before the edit")
        edited = time.time()
        f.write_text(TEXT.format(name=name, speed=50, startup=STARTUP))

        def rolled() -> bool:
            now = [(u, sid) for u, _, sid in h.lives(name) if u.startswith("agg_")]
            return len(now) == 2 and all(sid not in before.values() for _, sid in now)

        wait_until(rolled, timeout=LOAD + 30, interval=1, what="both workers on their new lives alone")
        took = time.time() - edited
        n = loop.ok
        wait_until(lambda: loop.ok >= n + 3, timeout=30, what="answers from the new lives")
    finally:
        loop.stop()
    summary(f"slow start (mocker startup_time {STARTUP:g} s): rolling update of 2 workers, {loop.ok} requests, "
            f"{len(loop.failed)} failed; the old lives left {took:.0f} s after the edit")
    assert loop.failed == [], loop.failed[:5]
    assert took >= STARTUP, took  # the old lives stayed for the whole load of the new ones
    evs = events(h, name, since)
    for unit in ("agg_0", "agg_1"):
        kinds = acts(evs, name, unit)
        # one surge launch, one cancel of the superseded life: nothing stopped while it loaded
        assert [k for k, _ in kinds] == ["LaunchStep", "CancelStep"], kinds
        launched, cancelled = mine(evs, name, unit)
        assert cancelled["at"] - launched["at"] >= STARTUP - 1, (launched, cancelled)
        assert ready_after(h, name, unit) >= STARTUP, launches(h, name)[unit]
    text = (h.state / "events.jsonl").read_text()
    assert "StartupTimeout" not in text and "not Ready within" not in text
