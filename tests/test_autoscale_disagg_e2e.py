"""reconcile.autoscale on a disaggregated mocker recipe on the real Slurm (one node: decode colocated
on the prefill node, so decode alone is autoscaled; recipe/autoscale.py refuses prefill then). A
load whose decode queues (one sequence at a time) adds decode workers and moves nothing of the
prefill worker; when it ends, decode comes back down with no failed request. Every wait is
bounded; the checks read Slurm's steps and the events."""

from __future__ import annotations

import json

import pytest

from helpers import wait_until
from support.autoscale import Load
from support.clients import stop
from support.clusters import deployed
from support.record import events, routed

pytestmark = pytest.mark.slurm

TEXT = """\
name: {name}
model: {{path: m}}
resources: {{gpus_per_node: 8}}
roles:
  prefill: {{nodes: 1, workers: 1, gpus: 1, engine: {{type: mocker, speedup_ratio: 1, max_num_seqs: 64}}}}
  decode: {{nodes: colocate, workers: 1, gpus: 1, engine: {{type: mocker, speedup_ratio: 1, max_num_seqs: 1}}}}
frontend: {{type: builtin, args: {{poll-interval: 0.2}}}}
reconcile:
  autoscale:
    roles:
      decode: {{min: 1, max: 3, target: {{waiting_per_worker: 2}}}}
    interval_seconds: 1
    scale_down_after_seconds: 8
    drain_seconds: 1
"""


def test_decode_is_sized_apart_from_prefill(tmp_path):
    with deployed(tmp_path, TEXT, "elastic-pd", timeout=90) as (h, name, endpoint):
        prefill = h.steps(name)["prefill_0"]
        with Load(endpoint, heavy=8) as load:
            light, heavy = load.light, load.heavy
            wait_until(lambda: "decode_1" in routed(h, name), timeout=90, interval=0.5,
                       what=f"a decode worker added and routed (events: {[e['message'] for e in events(h, name)][-5:]})")
            scaled = [e for e in events(h, name) if e["kind"] == "Scaled"]
            assert scaled and all(e["role"] == "decode" for e in scaled), [e["message"] for e in scaled]
            assert h.steps(name)["prefill_0"] == prefill, "the prefill worker is not moved by decode's count"
            load.end()
            n = light.ok
            wait_until(lambda: set(h.steps(name)) == {"prefill_0", "decode_0", "frontend_0"}, timeout=120,
                       interval=0.5, what="decode scaled back down to one worker")
            wait_until(lambda: light.ok >= n + 10, timeout=60, what="requests through the scale-down")
            stop(light)
            assert light.failed == [] and all(c.failed == [] for c in heavy), \
                [light.failed[:3]] + [c.failed[:3] for c in heavy]
            doc = json.loads((h.state / name / "autoscale.json").read_text())
            assert doc["last"]["decode"]["target"] == 1 and "prefill" not in doc["last"]
            assert h.steps(name)["prefill_0"] == prefill
