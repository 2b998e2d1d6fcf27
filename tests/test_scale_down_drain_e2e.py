"""A file edit that lowers `workers:` drains its victims on the real Slurm: they leave the routers
at once and are stopped only after rollout.pickup_seconds + drain_seconds from the edit, so the
requests they carry finish. A user's review saw 4 of 4,839 requests fail with a 502 "connection
reset" when the victims were cancelled in the tick that applied the edit."""

from __future__ import annotations

import calendar
import json
import time

import pytest

from benchmarks.traffic import Traffic
from helpers import wait_until
from support.clusters import slurm_h  # noqa: F401 - the fixture h: a harness on the real Slurm

pytestmark = [pytest.mark.slurm, pytest.mark.needs("nginx")]

# a slow mocker: each request takes a few hundred ms, so eight clients always have some under way
RECIPE = """\
name: {name}
model: {{path: m}}
resources: {{gpus_per_node: 8}}
engine: {{type: mocker, speedup_ratio: 0.05}}
roles: {{agg: {{workers: {workers}, gpus: 1}}}}
frontend: {{type: builtin, args: {{poll-interval: 0.2}}}}
reconcile: {{rollout: {{pickup_seconds: 1, drain_seconds: 3}}}}
"""


def test_a_file_scale_down_drains_its_victims_and_no_request_fails(h):
    name = h.name("down")
    f = h.manifests / f"{name}.yaml"
    f.write_text(RECIPE.format(name=name, workers=3))
    h.start()
    h.wait_steps(name, {"agg_0", "agg_1", "agg_2", "frontend_0"})
    endpoint = h.wait_ready(name, timeout=90)["endpoint"]
    traffic = Traffic(endpoint, threads=8, timeout=60).start()
    try:
        wait_until(lambda: len([o for o in traffic.outcomes if o.ok]) >= 40, timeout=60,
                   what=f"answers from the three workers (failed: {traffic.failed()[:3]})")
        f.write_text(RECIPE.format(name=name, workers=1))
        edited = time.time()
        h.wait_steps(name, {"agg_0", "frontend_0"}, timeout=60)
        n = len(traffic.outcomes)
        wait_until(lambda: len(traffic.outcomes) >= n + 20, timeout=60, what="answers from the one worker left")
    finally:
        traffic.stop()
    failed = traffic.failed()
    assert failed == [], [(o.code, o.detail) for o in failed[:5]]
    events = [json.loads(line) for line in (h.state / "events.jsonl").read_text().splitlines()]
    cancels = [e for e in events if e["recipe"] == name and e["kind"] == "CancelStep" and "scaled down" in e["message"]]
    assert {c["message"].split("/")[1].split(":")[0] for c in cancels} == {"agg_1", "agg_2"}, cancels
    # event times are whole seconds; the victims were stopped no sooner than pickup + drain (4 s)
    # after the edit was applied (the file settles 0.5 s first)
    first = min(calendar.timegm(time.strptime(c["time"], "%Y-%m-%dT%H:%M:%SZ")) for c in cancels)
    assert first >= int(edited) + 4 - 1, (first - edited, cancels)
    print(f"\nscale-down 3 -> 1 under 8 clients: {traffic.sent()} requests, 0 failed; "
          f"victims stopped {first - edited:.0f}s after the edit")
