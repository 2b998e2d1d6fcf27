"""The Slurm controller restarted with fresh state (issue 27): every job and step it knew is gone
and job ids start again at 1. On a Slurm of this test's own (tests/private_slurm.py: the dev
Slurm is shared, its controller is not ours to restart), the built-in stack serves through its
gateway with a client loop; after the restart the reconciler submits again and the *same*
endpoint serves again."""

from __future__ import annotations

import json
import time

import pytest

from benchmarks.traffic import Traffic
from harness import Harness
from helpers import wait_until
from private_slurm import running

pytestmark = [pytest.mark.slurm, pytest.mark.needs("nginx")]

RECIPE = """\
schema: 2
name: {name}
model: {{path: m}}
resources: {{gpus_per_node: 8}}
engine: {{type: mocker, speedup_ratio: 100}}
roles: {{agg: {{workers: 1, gpus: 1}}}}
frontend: {{type: builtin}}
"""


@pytest.fixture
def private(tmp_path, monkeypatch):
    with running(tmp_path / "slurm", monkeypatch) as s:
        yield s


def test_a_controller_restarted_with_fresh_state_serves_again_on_the_same_endpoint(private, tmp_path):
    h = Harness(tmp_path, "slurm")
    name = h.name("ctl")
    (h.manifests / f"{name}.yaml").write_text(RECIPE.format(name=name))
    h.start()
    traffic = None
    try:
        endpoint = h.wait_ready(name, timeout=90)["endpoint"]
        traffic = Traffic(endpoint).start()
        assert traffic.wait_ok(time.monotonic(), 30), traffic.failed()[-3:]
        (old_job,) = h.jobs(name)
        restarted = time.monotonic()
        private.restart_fresh()  # every job forgotten; the node kills their steps once it registers
        # the lost steps seen by the client: a request failed, or none answered for a second (the
        # gateway holds what no frontend can take, reconcile.gateway.hold_seconds)
        wait_until(lambda: traffic.recovered(restarted) is None, timeout=60, what="the lost steps seen by the client")
        # serving again, through the same endpoint: answers flowing for 2 s after the last disturbance
        back = wait_until(lambda: (b := traffic.recovered(restarted)) is not None and b > restarted
                          and time.monotonic() - b > 2.0 and b, timeout=120,
                          what=f"serving again (reconciler log:\n{h.log()[-3000:]})")
        g = h.wait_ready(name, timeout=60)
        assert g["endpoint"] == endpoint, (g["endpoint"], endpoint)
        (new_job,) = h.jobs(name)
        failed = [o for o in traffic.failed() if o.at >= restarted]
        print(f"\ncontroller restarted with fresh state: job {old_job} -> {new_job}, {len(failed)} failed, "
              f"serving again {back - restarted:.1f}s after the restart began, same endpoint {endpoint}")
        events = [json.loads(line) for line in (h.state / "events.jsonl").read_text().splitlines()]
        assert any(e["kind"] == "AllocationLost" and e["recipe"] == name for e in events), \
            "the forgotten allocation is reported"
    finally:
        if traffic is not None:
            traffic.stop()
        h.cleanup()
