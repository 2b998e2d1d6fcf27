"""Hand-over before the time limit, on the real Slurm: with a 1-minute time limit the deployment
outlives two time limits — each allocation is followed by a successor, the workers and the router
move onto it, the old job is released before Slurm ends it — and no request through the router
fails (a bounded client loop, the router's address unchanged on this one-node cluster)."""

from __future__ import annotations

import time

import pytest

from helpers import wait_until
from support.clients import Client, sending, stop
from support.clusters import deployed
from support.record import events, routed

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
    with deployed(tmp_path, TEXT, "handover") as (h, name, endpoint):
        first = h.jobs(name)
        assert len(first) == 1
        wait_until(lambda: len(routed(h, name)) == 2, what="both workers routed")
        with sending(Client(endpoint, limit=20000), join=15) as (client,):
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
            client.wait_more(5, what="requests after the hand-overs")
            stop(client, join=15)
            lost = events(h, name, "AllocationLost")
            assert lost == []  # every job was released by us, none ended by Slurm's time limit
            released = events(h, name, "CancelAlloc")
            assert len(released) >= 2 and all("no longer needed" in e["message"] for e in released)
            assert client.failed == [], (client.ok, client.failed[:5])
            # the hand-overs are planned: Available came up once and never moved after (the old
            # job's lives served until the successor's did), and Progressing stayed True from each
            # successor's submission until the old job was released (it said Converged while the
            # successor queued); from the record of every transition, not from polls
            record = events(h, name)
            avail = [e["status"] for e in record if e["kind"] == "Condition" and e.get("condition") == "Available"]
            assert avail[-1] == "True" and avail.count("True") == 1, avail
            for i, e in enumerate(record):
                if e["kind"] == "SubmitAlloc" and "successor" in e["message"]:
                    # the last one may still be under way when the test ends: up to now, then
                    end = next((j for j in range(i, len(record)) if record[j]["kind"] == "CancelAlloc"), len(record))
                    prog = [x for x in record[i:end] if x["kind"] == "Condition" and x.get("condition") == "Progressing"]
                    assert all(x["status"] == "True" for x in prog), (e["message"], prog)
