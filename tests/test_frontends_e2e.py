"""Several frontends behind the gateway, end to end on the real Slurm: each frontend is a unit
with its own lives, and killing one under traffic fails at most the request it held."""

from __future__ import annotations

import json
import time

import pytest

from benchmarks.traffic import Traffic
from harness import Harness, scancel
from helpers import wait_until
from support.clusters import slurm_h  # noqa: F401 - the fixture h: a harness on the real Slurm

pytestmark = [pytest.mark.slurm, pytest.mark.needs("nginx")]

RECIPE = """\
schema: 2
name: {name}
model: {{path: m}}
resources: {{gpus_per_node: 8}}
engine: {{type: mocker, speedup_ratio: 100}}
roles: {{agg: {{workers: 1, gpus: 1}}}}
frontend: {{type: builtin, enable_multiple_frontends: true, num_additional_frontends: 1, args: {{poll-interval: 0.25}}}}
"""


def _gateway(h: Harness, name: str) -> dict:
    return json.loads((h.state / name / "gateway.json").read_text())


def test_a_frontend_killed_under_traffic_fails_at_most_what_it_held(h):
    name = h.name("fe2")
    (h.manifests / f"{name}.yaml").write_text(RECIPE.format(name=name))
    h.start()
    steps = h.wait_steps(name, {"agg_0", "frontend_0", "frontend_1"})
    endpoint = h.wait_ready(name)["endpoint"]
    wait_until(lambda: len(_gateway(h, name).get("upstreams", [])) == 2, timeout=30, what="both frontends upstream")
    traffic = Traffic(endpoint).start()
    try:
        assert traffic.wait_ok(time.monotonic(), 20), traffic.failed()[:3]
        killed = time.monotonic()
        scancel(steps["frontend_0"][0])
        wait_until(lambda: h.steps(name).get("frontend_0", steps["frontend_0"]) != steps["frontend_0"], timeout=60,
                   what="frontend_0 relaunched")
        relaunched = time.monotonic()  # its old life had died by then
        wait_until(lambda: len(_gateway(h, name).get("upstreams", [])) == 2, timeout=30,
                   what="frontend_0 back among the upstreams")
        after = time.monotonic()
        assert traffic.wait_ok(after, 10)
    finally:
        traffic.stop()
    during = traffic.between(killed, after)
    # nothing sent after the kill fails: nginx retries every request the dead frontend refused. The
    # one request a frontend holds when it is killed (one client thread: at most one) is not retried
    # (never run twice: no non_idempotent), so it may fail with 502
    failed = traffic.failed()
    assert len(during) > 0 and len(failed) <= 1, [(round(f.at - killed, 2), f.code, f.detail[:60]) for f in failed]
    # held when it was killed: sent before the old life was gone (its relaunch seen), answered after the
    # kill (however long the kill takes on a busy host)
    assert all(f.code == 502 and f.sent <= relaunched and f.at >= killed for f in failed), \
        [(round(f.sent - killed, 2), round(f.at - killed, 2), f.code) for f in failed]
    assert h.steps(name)["frontend_1"] == steps["frontend_1"]  # the other frontend was not touched
    st = h.get(name)
    assert st["endpoint"] == endpoint and st["status"] == "Ready"
