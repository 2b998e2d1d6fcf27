"""Rollouts with surge on the real Slurm: an engine flag changes on a 1-worker and a 3-worker role
while a bounded client loop sends requests through the built-in router. No request fails, and at
every sample no more than desired + max_surge worker lives run and no fewer than desired -
max_unavailable are routed (the router's endpoints file lists Ready lives only)."""

from __future__ import annotations

import http.client
import json
import threading
from urllib.parse import urlsplit

import pytest

from harness import Harness
from helpers import wait_until

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


class Client(threading.Thread):
    """Sequential chat completions through the router until stopped or ``limit`` sent (bounded)."""

    def __init__(self, endpoint: str, limit: int = 5000):
        super().__init__(daemon=True)
        u = urlsplit(endpoint)
        self.host, self.port = u.hostname, u.port
        self.limit = limit
        self.ok = 0
        self.failed: list[str] = []
        self.halt = threading.Event()

    def run(self) -> None:
        body = json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}).encode()
        while not self.halt.is_set() and self.ok + len(self.failed) < self.limit:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=10)
            try:
                conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
                r = conn.getresponse()
                data = r.read()
                if r.status == 200:
                    self.ok += 1
                else:
                    self.failed.append(f"{r.status}: {data[:200]!r}")
            except (OSError, http.client.HTTPException) as e:
                self.failed.append(repr(e))
            finally:
                conn.close()


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
        f.write_text(TEXT.format(name=name, workers=workers, speed=50))

        samples = 0
        most = 0
        violations: list[str] = []

        def rolled() -> bool:
            nonlocal samples, most
            lives = [(u, slot, sid) for u, slot, sid in h.lives(name) if u.startswith("agg_")]
            n_routed = len(json.loads(routed.read_text())["workers"])
            samples += 1
            most = max(most, len(lives))
            if len(lives) > workers + 1:
                violations.append(f"more than desired + max_surge lives: {lives}")
            if n_routed < workers:
                violations.append(f"fewer than desired - max_unavailable routed: {n_routed}")
            return (len(lives) == workers and all(sid not in before.values() for _, _, sid in lives)
                    and all(slot == 1 for _, slot, _ in lives))

        wait_until(rolled, timeout=120, interval=0.2, what="every worker rolled onto its new life")
        g = h.wait_ready(name)
        assert g["endpoint"] == endpoint and g["restarts"] == 0
        n = client.ok
        wait_until(lambda: client.ok >= n + 5, what="requests after the rollout")
        client.halt.set()
        client.join(15)
        assert violations == [] and client.failed == [], (violations[:5], client.failed[:5])
        assert most == workers + 1 and samples > 5
        events = (h.state / "events.jsonl").read_text()
        assert events.count("its successor is Ready and routed") == workers
    finally:
        if client is not None:
            client.halt.set()
            client.join(15)
        h.cleanup()
