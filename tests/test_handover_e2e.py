"""Hand-over before the time limit, on the real Slurm: with a 1-minute time limit the deployment
outlives two time limits — each allocation is followed by a successor, the workers and the router
move onto it, the old job is released before Slurm ends it — and no request through the router
fails (a bounded client loop, the router's address unchanged on this one-node cluster)."""

from __future__ import annotations

import json
import time

import pytest

from harness import Harness
from helpers import wait_until
from test_surge_e2e import Client

pytestmark = pytest.mark.slurm

TEXT = """\
name: {name}
model: {{path: m}}
resources: {{gpus_per_node: 8}}
engine: {{type: mocker, speedup_ratio: 100}}
roles: {{agg: {{workers: 2, gpus: 1, restart: {{backoff_seconds: 1}}}}}}
frontend: {{type: builtin, args: {{poll-interval: 0.2}}}}
slurm: {{time_limit: "1"}}
reconcile: {{handover_seconds: 40, rollout: {{pickup_seconds: 1, drain_seconds: 1}}}}
"""


def test_a_deployment_outlives_two_time_limits_with_no_failed_request(tmp_path):
    h = Harness(tmp_path, "slurm")
    client = None
    try:
        name = h.name("handover")
        (h.manifests / f"{name}.yaml").write_text(TEXT.format(name=name))
        h.start()
        endpoint = h.wait_ready(name)["endpoint"]
        first = h.jobs(name)
        assert len(first) == 1
        routed = tmp_path / "state" / name / "endpoints.json"
        wait_until(lambda: len(json.loads(routed.read_text())["workers"]) == 2, what="both workers routed")
        client = Client(endpoint, limit=20000)
        client.start()
        seen: dict[str, float] = {first[0]: time.monotonic()}

        def outlived_two() -> bool:
            for j in h.jobs(name):
                seen.setdefault(j, time.monotonic())
            jobs = sorted(seen, key=seen.get)
            # the second job's 1-minute limit has passed, and neither of the first two is left
            return (len(jobs) >= 3 and time.monotonic() > seen[jobs[1]] + 62
                    and not {jobs[0], jobs[1]} & set(h.jobs(name)))

        # 1-minute limits, hand-over at 30 s left (half the limit): a new job every ~30 s
        wait_until(outlived_two, timeout=180, interval=0.5, what=f"two time limits outlived (jobs seen: {seen})")
        g = h.wait_ready(name)
        assert g["endpoint"] == endpoint
        n = client.ok
        wait_until(lambda: client.ok >= n + 5, what="requests after the hand-overs")
        client.halt.set()
        client.join(15)
        events = [json.loads(l) for l in (h.state / "events.jsonl").read_text().splitlines()]
        lost = [e for e in events if e["kind"] == "AllocationLost" and e["recipe"] == name]
        assert lost == []  # every job was released by us, none ended by Slurm's time limit
        released = [e for e in events if e["kind"] == "CancelAlloc" and e["recipe"] == name]
        assert len(released) >= 2 and all("no longer needed" in e["message"] for e in released)
        assert client.failed == [], (client.ok, client.failed[:5])
    finally:
        if client is not None:
            client.halt.set()
            client.join(15)
        h.cleanup()
