"""reconcile.autoscale.warm on the real Slurm (issue 49, item 3): a mocker whose engine takes 20 s to
start, behind the built-in router, with one warm spare. The spare is started and Ready but out of the
router (its endpoints file) and serves no request (its own /metrics); under a load step the scale-up
routes it at once — its first request comes well before a cold start could have finished — and a
new spare is launched behind it.

The comparisons are between timestamps the reconciler recorded: the scale-up's event, the promoted
spare's first routed request (startup.json's ``routedAfter``, noted at most one decision late) and
the replacement's own launch-to-Ready (a cold start, measured on the same node)."""

from __future__ import annotations

import calendar
import json
import time
import urllib.request

import pytest

from helpers import wait_until
from support.autoscale import Load
from support.clients import Client, stop
from support.clusters import deployed, workers
from support.record import events, routed

from reconciler.shell.elastic import engine_metrics as em

pytestmark = pytest.mark.slurm

STARTUP = 20
# The load step (support/autoscale.Load, heavy=5) keeps 6 sequential clients in flight, and the
# frontend's readiness canary (a one-token completion through the router about every second) is a 7th
# whenever a scrape finds it queued. The target must ask for 2 workers whichever it finds, on agg_0
# alone and the next second on agg_0 and the promoted agg_1 (which has not taken its share of the queue
# yet): an ask of max (3) leaves no room for a spare (spares live within max), and an ask of 1 during
# the load would scale down under it (scale_down_after_seconds 8 in the second test). Waiting per worker
# cannot: max_num_seqs 2 makes it 4 or 5 on one worker but 2 to 5 on two, depending on where the queue
# sits, and at waiting_per_worker 2 the canary's 5 waiting asked 3 (two runs out of three under load).
# Requests in flight per worker (running_per_worker: running + waiting) sum to the same whatever the
# split: at 4, 5 to 8 in flight ask 2 on one Ready worker or two, 3 needs 9 and 1 needs at most 4.
TEXT = f"""\
name: {{name}}
model: {{{{path: m}}}}
resources: {{{{gpus_per_node: 8}}}}
engine: {{{{type: mocker, speedup_ratio: 1, max_num_seqs: 2, startup_time: {STARTUP}}}}}
roles: {{{{agg: {{{{workers: 1, gpus: 1}}}}}}}}
frontend: {{{{type: builtin, args: {{{{poll-interval: 0.2}}}}}}}}
reconcile:
  autoscale:
    warm: 1
    roles:
      agg: {{{{min: 1, max: 3, target: {{{{running_per_worker: 4}}}}}}}}
    interval_seconds: 1
    scale_down_after_seconds: 600
"""


def spares(h, name: str) -> list[dict]:
    """The last decision's spares (autoscale.json): [{name, ready}]."""
    try:
        return json.loads((h.state / name / "autoscale.json").read_text())["last"]["agg"].get("spares", [])
    except (FileNotFoundError, ValueError, KeyError):
        return []


def lives(h, name: str) -> dict[str, dict]:
    """unit -> its last recorded life (launched, readyAfter, routedAfter) from startup.json."""
    try:
        doc = json.loads((h.state / name / "startup.json").read_text())
    except (FileNotFoundError, ValueError):
        return {}
    return {x["unit"]: x for x in doc.get("roles", {}).get("agg", [])}


def served(h, name: str, unit: str) -> float:
    """Requests the worker itself finished (the mocker's own counter on its /metrics)."""
    url = workers(h, name)[unit]["url"]
    with urllib.request.urlopen(f"{url}/metrics", timeout=5) as r:
        return em.parse(r.read().decode()).requests


def at(iso: str) -> float:
    return calendar.timegm(time.strptime(iso, "%Y-%m-%dT%H:%M:%SZ"))  # whole seconds: never later


def test_a_warm_spare_is_routed_at_once_and_replaced(tmp_path):
    with deployed(tmp_path, TEXT, "warm", timeout=150) as (h, name, endpoint):
        # the spare: started, Ready, out of the router
        wait_until(lambda: spares(h, name) == [{"name": "agg_1", "ready": True}], timeout=90, interval=0.5,
                   what=lambda: f"agg_1 Ready as a spare (spares: {spares(h, name)})")
        assert lives(h, name)["agg_1"]["readyAfter"] >= STARTUP, lives(h, name)
        assert routed(h, name) == ["agg_0"], routed(h, name)
        # the status: a worker that is Ready but not available (it serves nobody)
        row = wait_until(lambda: workers(h, name)["agg_1"] if workers(h, name)["agg_1"]["ready"] else None,
                         timeout=30, what="agg_1 Ready in the recorded status")
        assert row["available"] is False and workers(h, name)["agg_0"]["available"] is True, row
        # shown: get counts it as no serving worker, describe names it
        auto = wait_until(lambda: h.get(name)["autoscale"]["agg"], timeout=30, what="get's autoscale")
        assert auto["current"] == 1 and [x["name"] for x in auto["spares"]] == ["agg_1"], auto
        r = h.cli("describe", name)
        assert r.returncode == 0 and "warm spares (out of the routers): agg_1 (Ready)" in r.stdout, r.stdout
        # requests go to the serving worker only: the spare's own counter stays at zero
        light = Client(endpoint, limit=20)
        light.start()
        wait_until(lambda: light.ok + len(light.failed) >= 20, timeout=60, what="20 light requests")
        stop(light)
        assert light.failed == [], light.failed[:3]
        assert served(h, name, "agg_0") >= 20 and served(h, name, "agg_1") == 0
        assert lives(h, name)["agg_1"]["routedAfter"] is None
        with Load(endpoint, heavy=5):
            promoted = wait_until(lambda: events(h, name, "SparePromoted"), timeout=60, interval=0.5,
                                  what=lambda: f"the spare promoted (Scaled: {[e['message'] for e in events(h, name, 'Scaled')]})")
            first = wait_until(lambda: lives(h, name)["agg_1"]["routedAfter"], timeout=30, interval=0.5,
                               what="agg_1's first routed request recorded")
            assert "agg_1" in routed(h, name)
            # the replacement spare behind it: launched after the scale-up, Ready, out of the router
            wait_until(lambda: spares(h, name) == [{"name": "agg_2", "ready": True}], timeout=90, interval=0.5,
                       what=lambda: f"agg_2 Ready as the new spare (spares: {spares(h, name)}; "
                                    f"Scaled: {[e['message'] for e in events(h, name, 'Scaled')]})")
            assert "agg_2" not in routed(h, name), routed(h, name)
            assert served(h, name, "agg_2") == 0
        up = [e for e in events(h, name, "Scaled") if e["to"] > e["from"]]
        assert up and up[0]["from"] == 1 and up[0]["to"] == 2, up
        decided = at(up[0]["time"])
        spare, cold = lives(h, name)["agg_1"], lives(h, name)["agg_2"]
        routed_at = spare["launched"] + first
        figures = (f"scale-up at {up[0]['time']}; agg_1 (spare) first request {routed_at - decided:.1f}s after it; "
                   f"agg_2 (the replacement) launched {cold['launched'] - decided:+.1f}s, cold launch-to-Ready "
                   f"{cold['readyAfter']}s; promoted: {promoted[0]['message']}")
        print(figures)
        assert promoted[0]["promoted"] == ["agg_1"], promoted[0]
        assert cold["launched"] >= decided - 1, figures  # launched behind the promoted one, not before
        assert cold["readyAfter"] >= STARTUP, figures  # what a cold start costs here
        # the spare's requests came well before a cold start decided at the same moment could be Ready
        assert routed_at - decided < cold["readyAfter"] / 2, figures


def test_a_scale_down_keeps_its_victim_as_the_spare(tmp_path):
    """1 serving + 1 spare, a load step (2 serving + 1 spare), the load's end: the victim agg_1 drains
    out of the router and stays, running, as the spare (the same step: no relaunch), while agg_2, the
    spare above it that never served, is stopped."""
    text = TEXT.replace("scale_down_after_seconds: 600", "scale_down_after_seconds: 8\n    drain_seconds: 1")
    with deployed(tmp_path, text, "warmdown", timeout=150) as (h, name, endpoint):
        wait_until(lambda: spares(h, name) == [{"name": "agg_1", "ready": True}], timeout=90, interval=0.5,
                   what=lambda: f"agg_1 Ready as a spare (spares: {spares(h, name)})")
        with Load(endpoint, heavy=5) as load:
            wait_until(lambda: spares(h, name) == [{"name": "agg_2", "ready": True}], timeout=90, interval=0.5,
                       what=lambda: f"agg_1 promoted, agg_2 Ready as the new spare (spares: {spares(h, name)})")
            served_by = h.steps(name)["agg_1"][0]
            load.end()
            wait_until(lambda: set(h.steps(name)) == {"agg_0", "agg_1", "frontend_0"}
                       and spares(h, name) == [{"name": "agg_1", "ready": True}], timeout=120, interval=0.5,
                       what=lambda: f"scaled down with agg_1 kept as the spare (steps {sorted(h.steps(name))}, "
                                    f"spares {spares(h, name)})")
        assert h.steps(name)["agg_1"][0] == served_by, "the victim is kept running: no relaunch"
        assert routed(h, name) == ["agg_0"], routed(h, name)
        evs = events(h, name)
        assert any(e["kind"] == "Draining" and "agg_1" in e["message"] for e in evs), [e["message"] for e in evs]
        assert any(e["kind"] == "CancelStep" and "agg_2" in e["message"] for e in evs), [e["message"] for e in evs]
