"""Kubernetes Deployment semantics on the real Slurm: during a rolling update (mocker, the built-in
router, surge) the deployment stays Available the whole time while Ready goes False and comes back,
`get --wait --for available` returns while the new lives are still starting, and `--for ready` /
`--for progressed` once they serve. "The whole time" is read from the reconciler's own record of
every condition transition (state/events.jsonl), not from polls that could miss a short flap."""

from __future__ import annotations

import json

import pytest

from harness import Harness
from helpers import wait_until
from support.clients import Client

pytestmark = pytest.mark.slurm

# max_surge 2: both new lives start at once beside the old ones; the new spec's lives answer /health
# only after {startup}s, so the rollout is still under way when --for available is asked
TEXT = """\
name: {name}
model: {{path: m}}
resources: {{gpus_per_node: 8}}
engine: {{type: mocker, speedup_ratio: {speed}}}
roles: {{agg: {{workers: 2, gpus: 1, args: {{startup-time: {startup}}}}}}}
frontend: {{type: builtin, args: {{poll-interval: 0.2}}}}
reconcile: {{rollout: {{max_surge: 2, max_unavailable: 0, pickup_seconds: 1, drain_seconds: 1}}}}
"""


def conditions(h: Harness, name: str, since: int) -> list[tuple[str, str, str]]:
    """(condition, status, reason) of the recipe's Condition events after the first ``since`` lines."""
    lines = (h.state / "events.jsonl").read_text().splitlines()[since:]
    return [(e["condition"], e["status"], e["reason"]) for e in map(json.loads, lines)
            if e["kind"] == "Condition" and e["recipe"] == name]


def available_since(h: Harness, name: str) -> str:
    st = json.loads((h.state / name / "status.json").read_text())
    (c,) = [c for c in st["conditions"] if c["type"] == "Available"]
    assert c["status"] == "True", c
    return c["lastTransitionTime"]


def test_a_rolling_update_stays_available_while_ready_goes_false_and_back(tmp_path):
    h = Harness(tmp_path, "slurm")
    client = None
    try:
        name = h.name("avail")
        f = h.manifests / f"{name}.yaml"
        f.write_text(TEXT.format(name=name, speed=100, startup=0))
        h.start()
        endpoint = h.wait_ready(name, timeout=120)["endpoint"]
        routed = h.state / name / "endpoints.json"
        wait_until(lambda: len(json.loads(routed.read_text())["workers"]) == 2, what="both workers routed")
        client = Client(endpoint)
        client.start()
        wait_until(lambda: client.ok >= 5, what=f"requests through the router (failed: {client.failed[:3]})")
        since = available_since(h, name)
        mark = len((h.state / "events.jsonl").read_text().splitlines())

        f.write_text(TEXT.format(name=name, speed=50, startup=30))  # a new engine flag: every worker rolls
        r = h.cli("get", name, "--wait", "--for", "available", "--timeout", "45", "-o", "json")
        assert r.returncode == 0, r.stdout + r.stderr
        (row,) = json.loads(r.stdout)
        kinds = {c["type"]: c for c in row["conditions"]}
        # returned for the edited file while its new lives still start: the old ones serve
        assert kinds["Available"]["status"] == "True" and kinds["Ready"]["status"] == "False", kinds
        assert kinds["Progressing"]["status"] == "True", kinds
        assert row["replicas"]["available"] == 2 and row["replicas"]["ready"] < 2, row["replicas"]
        r = h.cli("get", name)
        head, line = r.stdout.splitlines()[:2]
        assert head.split()[:4] == ["NAME", "READY", "UP-TO-DATE", "AVAILABLE"], r.stdout
        assert line.split()[3] == "2", r.stdout  # AVAILABLE: both old lives serve

        wait_until(lambda: h.get(name)["status"] == "Ready", timeout=180, interval=0.5,
                   what="the rollout finished (Ready at the new spec)")
        r = h.cli("get", name, "--wait", "--for", "progressed", "--timeout", "45")
        assert r.returncode == 0, r.stdout + r.stderr
        r = h.cli("get", name, "--wait", "--for", "ready", "--timeout", "45", "-o", "json")
        assert r.returncode == 0, r.stdout + r.stderr
        (row,) = json.loads(r.stdout)
        assert row["replicas"] == {"desired": 2, "ready": 2, "upToDate": 2, "available": 2}, row
        n = client.ok
        wait_until(lambda: client.ok >= n + 5, what="requests after the rollout")
        client.halt.set()
        client.join(15)
        assert client.failed == [], client.failed[:5]

        seen = conditions(h, name, mark)
        # Ready went False for the rollout and came back; Available never moved
        assert ("Ready", "False", "NotReady") in seen and seen.index(("Ready", "False", "NotReady")) < max(
            i for i, c in enumerate(seen) if c[:2] == ("Ready", "True")), seen
        assert not [c for c in seen if c[0] == "Available"], seen
        assert available_since(h, name) == since
        # Progressing went True with the edit and False only once converged
        prog = [c for c in seen if c[0] == "Progressing"]
        assert prog[0][1] == "True" and prog[-1] == ("Progressing", "False", "Converged"), prog
        assert [c for c in prog if c[1] == "False"] == [prog[-1]], prog
    finally:
        if client is not None:
            client.halt.set()
            client.join(15)
        h.cleanup()
