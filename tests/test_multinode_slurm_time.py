"""Reservations and quarantine on the real 3-node Slurm.

- A maintenance reservation created over a running allocation's node (not including our jobs)
  moves that allocation's hand-over before the reservation starts: a successor on another node,
  the workers moved with surge, the old job released before the start, no failed request.
- A node where a worker fails three times is quarantined: the worker's allocation is handed over
  to a new one that excludes it, and the worker lands (and stays Ready) elsewhere.
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid

import pytest

from harness import Harness, sh
from helpers import wait_until
from reconciler import labels
from support.clients import Client, sending, stop
from support.clusters import mn  # noqa: F401 - the fixture: the 3-node cluster, one test at a time
from support.record import events, routed

pytestmark = pytest.mark.multinode

SPREAD = """\
schema: 2
name: {name}
model: {{path: m}}
resources: {{gpus_per_node: 4}}
engine: {{type: mocker, speedup_ratio: 100}}
roles:
  agg: {{workers: 2, gpus: 4, restart: {{backoff_seconds: 0.5}}}}
frontend: {{type: builtin, args: {{poll-interval: 0.2}}}}
slurm: {{time_limit: "30"}}
reconcile: {{nodes_per_allocation: 1, handover_seconds: 40, rollout: {{pickup_seconds: 1, drain_seconds: 1}}}}
"""


def allocs(h: Harness, recipe: str) -> dict[str, tuple[str, str, str]]:
    """job id -> (allocation index, state, node) of the recipe's jobs."""
    out = {}
    for line in sh("squeue", "-h", "-o", "%i|%j|%T|%N").splitlines():
        job, name, state, node = line.split("|")
        if name.startswith(f"rcl:{h.owner}:{labels.recipe_tag(recipe)}:"):
            out[job] = (name.rsplit(":", 1)[1], state, node)
    return out


def test_a_reservation_over_an_allocations_node_hands_it_over_before_it_starts(mn, tmp_path):  # noqa: F811
    h = mn
    h.env["RECONCILER_SLURM_SLOW_SECONDS"] = "5"  # the reservations are read every 5 s (default 60)
    name = h.name("resv")
    resv = f"slurmtime-{uuid.uuid4().hex[:6]}"
    try:
        (h.manifests / f"{name}.yaml").write_text(SPREAD.format(name=name))
        h.start()
        endpoint = h.wait_ready(name, timeout=120)["endpoint"]
        wait_until(lambda: len(routed(h, name)) == 2, what="both workers routed")
        # the allocation that does not hold the router (its address must not change for the client)
        (job, (_, _, node)), = [(j, v) for j, v in allocs(h, name).items() if v[0] == "a1"]
        with sending(Client(endpoint, limit=20000), join=15) as (client,):
            wait_until(lambda: client.ok >= 5, what="requests before the reservation")
            sh("scontrol", "create", "reservation", f"ReservationName={resv}", "StartTime=now+100", "Duration=5",
               f"Nodes={node}", "Users=nobody", "Flags=MAINT,IGNORE_JOBS")
            start = time.mktime(time.strptime(
                dict(t.split("=", 1) for t in sh("scontrol", "-o", "show", "reservation", resv).split() if "=" in t)
                ["StartTime"], "%Y-%m-%dT%H:%M:%S"))
            wait_until(lambda: job not in allocs(h, name), timeout=start - time.time() + 60, interval=0.5,
                       what=f"job {job} on the reserved node {node} released (jobs: {allocs(h, name)})")
            assert time.time() < start  # gone before the reservation begins
            now = allocs(h, name)
            assert len(now) == 2 and all(state == "RUNNING" and n != node for _, state, n in now.values()), now
            g = h.wait_ready(name)
            assert g["endpoint"] == endpoint
            client.wait_more(5, what="requests after the hand-over")
            stop(client, join=15)
            early = [e for e in events(h, kind="AllocationEndsEarly") if e["job"] == job]
            assert early and f"reservation {resv} takes {node}" in early[0]["message"]
            assert events(h, kind="AllocationLost") == []
            assert client.failed == [], (client.ok, client.failed[:5])
    finally:
        subprocess.run(["scontrol", "delete", f"ReservationName={resv}"], capture_output=True, timeout=60)
        h.cleanup()


FAILING = """\
schema: 2
name: {name}
model: {{path: m}}
resources: {{gpus_per_node: 4}}
engine: {{type: mocker, speedup_ratio: 100}}
roles:
  agg: {{workers: 1, gpus: 4, args: {{crash-after: 1, crash-on-nodes: "{bad}"}},
         restart: {{backoff_seconds: 0.5, max_backoff_seconds: 1}}}}
frontend: {{type: none}}
reconcile: {{nodes_per_allocation: 1}}
"""


def test_a_node_that_fails_a_worker_three_times_is_quarantined_and_the_worker_lands_elsewhere(mn, tmp_path):  # noqa: F811
    h = mn
    nodes = sh("sinfo", "-h", "-N", "-o", "%N").split()
    bad, good = nodes[:2], nodes[2]  # Slurm fills the first idle nodes first: the worker starts on a bad one
    name = h.name("quar")
    (h.manifests / f"{name}.yaml").write_text(FAILING.format(name=name, bad=",".join(bad)))
    h.start()
    # the worker crashes on each bad node it gets until that node is quarantined, then lands on the good one
    # (on a bad node it is Ready for a moment before each crash: Ready counts only on the good one)
    def ready_on_good():
        on = [v[2] for v in allocs(h, name).values() if v[1] == "RUNNING"]
        return on == [good] and h.get(name)["status"] == "Ready"

    wait_until(ready_on_good, timeout=240, interval=1,
               what=f"{name} Ready on {good} (jobs {allocs(h, name)}; log:\n{h.log()[-3000:]})")
    q = events(h, kind="NodeQuarantined")
    assert q and {e["node"] for e in q} <= set(bad)
    first = q[0]
    assert "3 worker failures" in first["message"]
    state = json.loads((h.state / "quarantine.json").read_text())
    assert set(state["quarantined"]) == {e["node"] for e in q}
    r = h.cli("describe", name, "-o", "json")
    assert set(json.loads(r.stdout)["quarantinedNodes"]) == {e["node"] for e in q}
    # never every node: the good one stayed placeable
    assert good not in state["quarantined"]
