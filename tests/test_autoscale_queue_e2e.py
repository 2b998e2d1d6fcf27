"""Queue-aware scale-up (issue 28, item 3) with an allocation that really pends: a Slurm of the
test's own with one GPU (tests/private_slurm.py), a recipe autoscaled 1..2 one-GPU workers.
Under load the second worker's allocation cannot start (Resources): the role reports it as
capacity coming, with Slurm's reason; no second allocation is submitted for the same need; when
the load is gone the still-pending allocation is cancelled, and no request failed.

The target is 2 waiting per worker, not 1: on a busy machine the light client's request (or the
canary) is caught queued for one engine step now and then, and one waiting request against a
target of 1 is a ratio of 1, which keeps the count (HPA's tolerance): one such scrape in each
scale-down window held the second worker for good (seen in CI at load 20)."""

from __future__ import annotations

import json

import pytest

from helpers import wait_until
from private_slurm import running
from support.autoscale import Load
from support.clients import stop
from support.clusters import deployed
from support.record import events

pytestmark = pytest.mark.slurm

TEXT = """\
name: {name}
model: {{path: m}}
resources: {{gpus_per_node: 1}}
engine: {{type: mocker, speedup_ratio: 1, max_num_seqs: 2}}
roles: {{agg: {{workers: 1, gpus: 1}}}}
frontend: {{type: builtin, args: {{poll-interval: 0.2}}}}
reconcile:
  autoscale:
    roles:
      agg: {{min: 1, max: 2, target: {{waiting_per_worker: 2}}}}
    interval_seconds: 1
    scale_down_after_seconds: 6
    drain_seconds: 1
"""


@pytest.fixture
def private(tmp_path, monkeypatch):
    with running(tmp_path / "slurm", monkeypatch, gpus=1) as s:
        yield s


def pending(private) -> list[str]:
    return [j for j, st in (line.split() for line in private._sh("squeue", "-h", "-o", "%i %T").stdout.splitlines())
            if st == "PENDING"]


def test_a_worker_whose_allocation_pends_is_coming_capacity_and_is_cancelled_when_the_load_goes(private, tmp_path):
    with deployed(tmp_path, TEXT, "queue", timeout=90) as (h, name, endpoint):
        with Load(endpoint, heavy=10) as load:
            light, heavy = load.light, load.heavy
            # 2 asked; the node's one GPU is the first worker's: the second worker's allocation pends
            status = lambda: json.loads((h.state / name / "autoscale.json").read_text())["last"]["agg"]  # noqa: E731
            try:
                wait_until(lambda: pending(private), timeout=120, interval=0.5, what="an allocation pending")
            except AssertionError as e:
                raise AssertionError(f"{e}; autoscale: {status()}; heavy answered {[c.ok for c in heavy]}, "
                                     f"failed {[c.failed[:1] for c in heavy]}") from None
            try:
                # with Slurm's own reason (squeue --start, asked at the pending-recheck pace)
                wait_until(lambda: any("agg_1 wait for" in c and "Resources" in c for c in status().get("coming", [])),
                           timeout=90, what="the pending capacity reported with Slurm's reason")
            except AssertionError as e:
                raise AssertionError(f"{e}; autoscale: {status()}; ticks {h.ticks()}; log:\n{h.log()[-4000:]}") from None
            # never a second allocation for the same need, however long the load stays (10 more ticks)
            seen = set(pending(private))
            for _ in range(10):
                n = h.ticks()
                wait_until(lambda: h.ticks() > n, timeout=30, what="a tick")
                seen |= set(pending(private))
            assert len(seen) == 1 and len(h.jobs(name)) == 2, (seen, h.jobs(name))
            # the load goes: the pending allocation is cancelled (and the extra worker drained)
            load.end()
            wait_until(lambda: not pending(private), timeout=90, interval=0.5,
                       what=lambda: f"the pending allocation cancelled (events: {[e['message'] for e in events(h, name)][-6:]}; "
                                    f"autoscale: {(h.state / name / 'autoscale.json').read_text()}; ticks {h.ticks()}; log:\n{h.log()[-3000:]})")
            wait_until(lambda: set(h.steps(name)) == {"agg_0", "frontend_0"}, timeout=120, interval=0.5,
                       what="back to one worker")
            stop(light)
            assert light.failed == [], light.failed[:5]
            assert all(c.failed == [] for c in heavy), [c.failed[:3] for c in heavy]
