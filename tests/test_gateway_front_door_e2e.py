"""The gateway's front door (issue 48, item 6) on the real Slurm with the real nginx and holder: a
mocker deployment that scales to zero, behind API keys (``reconcile.gateway.api_keys``).

Before: the gateway served anyone; ``GET /holder/stats`` and the router's ``/metrics`` went
through it; an unauthenticated ``GET /favicon.ico`` woke the deployment at zero (an sbatch,
``Scaled 0 -> 1 (WokeUp)``); nothing capped what the holder kept."""

from __future__ import annotations

import json

import pytest

from harness import Harness
from helpers import wait_until
from reconciler.gateway.keys import line_for
from reconciler.shell.gateway import holder_supervisor
from support.record import events
from support.gateways import Bg, call

pytestmark = [pytest.mark.slurm, pytest.mark.needs("nginx")]
KEY = "sk-front-door-e2e-key-0001"

TEXT = """\
name: {name}
model: {{path: m}}
resources: {{gpus_per_node: 8}}
engine: {{type: mocker, speedup_ratio: 10}}
roles: {{agg: {{workers: 1, gpus: 1}}}}
frontend: {{type: builtin, args: {{poll-interval: 0.2}}}}
reconcile:
  gateway: {{api_keys: {keys}, max_held_requests: 1}}
  autoscale:
    roles:
      agg: {{min: 0, max: 1, target: {{waiting_per_worker: 4}}}}
    interval_seconds: 2
    scale_down_after_seconds: 5
    scale_to_zero_after_seconds: 8
    drain_seconds: 1
    hold_timeout_seconds: 120
"""


def scaled(h: Harness, name: str, why: str) -> list[dict]:
    return [e for e in events(h, name) if e["kind"] == "Scaled" and e.get("reason") == why]


def test_keys_at_the_gateway_and_nothing_unauthenticated_wakes_a_deployment_at_zero(tmp_path):
    h = Harness(tmp_path, "slurm")
    held: Bg | None = None
    try:
        keys = tmp_path / "api-keys"
        keys.write_text(line_for(KEY, "e2e") + "\n")
        name = h.name("door")
        (h.manifests / f"{name}.yaml").write_text(TEXT.format(name=name, keys=keys))
        h.start()
        url = h.wait_ready(name, timeout=90)["endpoint"]
        st, hdrs, body = call(url)
        assert st == 401 and json.loads(body)["error"]["type"] == "authentication_error", (st, body)
        assert call(url, key=KEY)[0] == 200
        # internal pages stay on the reconciler's host: nginx's own 404, never the holder's or router's
        for path in ("/holder/stats", "/metrics"):
            assert call(url, path, key=KEY, method="GET")[0] == 404, path

        wait_until(lambda: h.jobs(name) == [] and h.steps(name) == {}, timeout=120, interval=0.5,
                   what=f"scaled to zero (events: {[e['message'] for e in events(h, name)][-5:]})")
        assert scaled(h, name, "WokeUp") == []
        # at zero: requests without a key, and pages that are not OpenAI's, wake nothing
        assert call(url)[0] == 401
        assert call(url, "/health", method="GET")[0] == 401
        assert call(url, "/favicon.ico", method="GET")[0] == 404
        assert call(url, "/v1/models", key="sk-not-a-key-of-this-file", method="GET")[0] == 401
        h.idle(name, ticks=6)  # three autoscaler intervals: no sbatch, no step
        assert scaled(h, name, "WokeUp") == [] and h.jobs(name) == [], [e["message"] for e in events(h, name)][-5:]

        # a keyed request is held and wakes it; a second beyond max_held_requests: 1 gets 503 at once
        port = json.loads((h.state / name / "gateway.json").read_text())["holderPort"]
        held = Bg(url, key=KEY, timeout=180)
        held.start()
        wait_until(lambda: (holder_supervisor.stats(port) or {}).get("held") == 1, timeout=30, what="held")
        st, hdrs, body = call(url, key=KEY)
        assert st == 503 and int(hdrs["Retry-After"]) >= 1 and b"at most 1" in body, (st, hdrs, body)
        held.join(180)
        assert held.out is not None and held.out[0] == 200, held.out
        assert len(scaled(h, name, "WokeUp")) == 1
    finally:
        if held is not None:
            held.join(5)
        h.cleanup()
