"""Rollouts with surge on the real Slurm: an engine flag changes on a 1-worker and a 3-worker role
while a bounded client loop sends requests through the built-in router. No request fails, and
the reconciler's own record of what it did (state/events.jsonl: every launch and every cancel, in
order) shows the surge: after each of its actions, desired + max_surge worker lives at most and
never fewer than desired, exactly desired + 1 at some point, each old life cancelled only once its
successor was Ready and routed. Nothing here depends on a poll of squeue landing in a short window."""

from __future__ import annotations

import json
import re

import pytest

from harness import Harness
from helpers import wait_until
from support.clients import Client

pytestmark = pytest.mark.slurm

TEXT = """\
name: {name}
model: {{path: m}}
resources: {{gpus_per_node: 8}}
engine: {{type: mocker, speedup_ratio: {speed}}}
roles: {{agg: {{workers: {workers}, gpus: 1, restart: {{backoff_seconds: 1}}}}}}
frontend: {{type: builtin, args: {{poll-interval: 0.2}}}}
reconcile: {{rollout: {{max_surge: 1, max_unavailable: 0, pickup_seconds: 1, drain_seconds: 1}}}}
"""


def lives(h: Harness, name: str) -> list[int]:
    """The recipe's agg worker lives after each launch or cancel the reconciler recorded, in order
    (one rank per worker here: a launch is a life)."""
    n, out = 0, []
    for e in map(json.loads, (h.state / "events.jsonl").read_text().splitlines()):
        if e["recipe"] != name:
            continue
        if e["kind"] == "LaunchStep" and re.match(rf"launch {re.escape(name)}/agg_\d+ ", e["message"]):
            n += 1
        elif e["kind"] == "CancelStep" and f"({name}/agg_" in e["message"]:
            n -= 1
        else:
            continue
        out.append(n)
    return out


@pytest.mark.parametrize("workers", [1, 3])
def test_a_flag_change_rolls_with_surge_and_no_request_fails(tmp_path, workers):
    h = Harness(tmp_path, "slurm")
    client = None
    try:
        name = h.name(f"surge{workers}")
        f = h.manifests / f"{name}.yaml"
        f.write_text(TEXT.format(name=name, workers=workers, speed=100))
        h.start()
        endpoint = h.wait_ready(name)["endpoint"]
        routed = tmp_path / "state" / name / "endpoints.json"
        wait_until(lambda: len(json.loads(routed.read_text())["workers"]) == workers, what="all workers routed")
        client = Client(endpoint)
        client.start()
        wait_until(lambda: client.ok >= 5, what=f"requests through the router (failed: {client.failed[:3]})")
        before = {u: sid for u, _, sid in h.lives(name) if u.startswith("agg_")}
        deployed = lives(h, name)
        assert deployed[-1:] == [workers], deployed
        f.write_text(TEXT.format(name=name, workers=workers, speed=50))

        def rolled() -> bool:
            now = [(u, slot, sid) for u, slot, sid in h.lives(name) if u.startswith("agg_")]
            return (len(now) == workers and all(sid not in before.values() for _, _, sid in now)
                    and all(slot == 1 for _, slot, _ in now))

        wait_until(rolled, timeout=120, interval=0.5, what="every worker rolled onto its new life")
        g = h.wait_ready(name)
        assert g["endpoint"] == endpoint and g["restarts"] == 0
        n = client.ok
        wait_until(lambda: client.ok >= n + 5, what="requests after the rollout")
        client.halt.set()
        client.join(15)
        assert client.failed == [], client.failed[:5]
        rollout = lives(h, name)[len(deployed):]
        # a new life beside each old one (surge), never more than max_surge (1) at once, never
        # fewer than desired (max_unavailable 0): from the reconciler's record of every action
        assert max(rollout) == workers + 1 and min(rollout) >= workers and rollout[-1] == workers, rollout
        assert len(rollout) == 2 * workers, rollout  # one launch and one cancel per worker, no more
        events = (h.state / "events.jsonl").read_text()
        assert events.count("its successor is Ready and routed") == workers
    finally:
        if client is not None:
            client.halt.set()
            client.join(15)
        h.cleanup()
