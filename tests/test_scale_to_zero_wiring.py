"""Scale to zero's wiring without Slurm: the holder's counters are the autoscaler's demand (a real
holder process), and the wake-up clock that tells held requests how long they may wait."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from types import SimpleNamespace as NS

import pytest

from reconciler.core.plan.pending import PendingInfo
from reconciler.drivers.state import StateDir
from reconciler.recipe.autoscale import AutoscaleConfig
from reconciler.shell.gateway import holder_supervisor
from reconciler.shell.gateway import wake_eta
from reconciler.shell.elastic.autoscale import Autoscaler
from harness import _ranges
from tests.helpers import post, wait_until

ZERO = AutoscaleConfig.model_validate({"roles": {"agg": {"min": 0, "max": 2, "target": {"waiting_per_worker": 4}}},
                                       "scale_to_zero_after_seconds": 60})
NEVER = AutoscaleConfig.model_validate({"roles": {"agg": {"min": 1, "max": 2, "target": {"waiting_per_worker": 4}}}})


@pytest.fixture
def held_by(tmp_path):
    """A real holder for recipe r (3 s hold: the test sees the request held even on a host that
    stalls a second; its gateway does not answer, so nothing is forwarded). Ports of this test
    worker's own range: an ephemeral one could be taken by anyone before the holder binds it."""
    state = StateDir(tmp_path / "state")
    prefix = (state.root / "r" / "gateway").absolute()
    port = next(_ranges)
    pid, did = holder_supervisor.ensure(prefix, holder_supervisor.argv(holder_supervisor.python(), "r", port, port + 1, 3.0, prefix), port)
    assert pid is not None and holder_supervisor.wait_listening(port), did
    (state.root / "r" / "gateway.json").write_text(json.dumps({"holderPort": port}))
    yield state, port
    holder_supervisor.stop(prefix)


def test_the_holders_requests_are_the_autoscalers_demand(held_by):
    state, port = held_by
    a = Autoscaler(state)
    url = f"http://127.0.0.1:{port}/v1/completions"
    assert a._held("r", ZERO) == 0  # nothing came
    t = threading.Thread(target=post, args=(url, {"prompt": "x"}), daemon=True)
    t.start()
    wait_until(lambda: (holder_supervisor.stats(port) or {}).get("held") == 1, what="the request held")
    assert a._held("r", ZERO) == 1 and a._held("r", NEVER) == 0  # only a recipe that scales to zero asks
    t.join(10)
    assert a._held("r", ZERO) == 0, "answered (503) and nothing new since the last look"
    # a request that came and went between two looks still asked for the deployment
    status, body = post(url, {"prompt": "y"})
    assert status == 503 and json.loads(body)["error"]["code"] == 503
    assert a._held("r", ZERO) == 1
    assert a._held("r", ZERO) == 0


def dec(target: int, scaled: int = 0) -> NS:
    return NS(scaled=scaled, memory=NS(target=target))


# (name, the clock before, decisions, Ready workers per role, now) -> the clock after
WAKE = [
    ("a wake-up starts the clock", {"since": None, "took": 40.0}, {"agg": dec(1, +1)}, {"agg": 0}, 100.0,
     {"since": 100.0, "took": 40.0}),
    ("still starting: the clock runs", {"since": 100.0, "took": 40.0}, {"agg": dec(1)}, {"agg": 0}, 120.0,
     {"since": 100.0, "took": 40.0}),
    ("every role Ready: how long it took is kept", {"since": 100.0, "took": 40.0}, {"agg": dec(1)}, {"agg": 1}, 125.0,
     {"since": None, "took": 25.0}),
    ("one role of two Ready is not woken yet", {"since": 100.0, "took": None},
     {"prefill": dec(1), "decode": dec(1)}, {"prefill": 1, "decode": 0}, 125.0, {"since": 100.0, "took": None}),
    ("back to zero before Ready: no clock, the old duration kept", {"since": 100.0, "took": 40.0},
     {"agg": dec(0, -1)}, {"agg": 0}, 200.0, {"since": None, "took": 40.0}),
    ("a scale-up that is not a wake-up starts nothing", {"since": None, "took": None}, {"agg": dec(2, +1)},
     {"agg": 1}, 100.0, {"since": None, "took": None}),
    ("a bad memory is no clock", "garbage", {"agg": dec(1)}, {"agg": 1}, 100.0, {"since": None, "took": None}),
]


@pytest.mark.parametrize("name, before, decisions, ready, now, want", WAKE, ids=[w[0] for w in WAKE])
def test_the_wake_up_clock(name, before, decisions, ready, now, want):
    facts = {r: NS(ready=n) for r, n in ready.items()}
    assert wake_eta.track(before, decisions, facts, now) == want


def observed(pending: dict) -> NS:
    return NS(pending=pending, allocs_of=lambda _n: [NS(job_id=j) for j in pending])


def test_what_the_holder_tells_a_request_it_turns_away(tmp_path: Path):
    wake_file = tmp_path / "r" / "gateway" / "wake.json"
    at_zero = NS(units=())
    # starting (no worker yet, not at zero): nothing said of a wake-up
    wake_eta.tell_holder(tmp_path, "r", {"since": None, "took": None}, at_zero, observed({}), 900.0)
    assert not wake_file.exists()
    wake_eta.tell_holder(tmp_path, "r", {"since": None, "took": 30.0}, at_zero, observed({}), 1000.0, at_zero=True)
    doc = json.loads(wake_file.read_text())
    assert doc == {"expectedReadyAt": 1030.0, "why": "scaled to zero: a held request brings a worker back"}
    # waking with an allocation in Slurm's queue: its expected start, and Slurm's reason, in words
    info = PendingInfo("77", 0, "Priority", 1000.0 + 600, 990.0)
    wake_eta.tell_holder(tmp_path, "r", {"since": 995.0, "took": 30.0}, NS(units=(1,)), observed({"77": info}), 1000.0)
    doc = json.loads(wake_file.read_text())
    assert doc["expectedReadyAt"] == 1600.0 and "Priority" in doc["why"] and "job 77" in doc["why"], doc
    # serving: nothing waits for a wake-up, and a later refusal (a frontend's relaunch gap) must not
    # say the deployment is coming back from zero: the file goes (found in review)
    wake_eta.tell_holder(tmp_path, "r", {"since": None, "took": 30.0}, NS(units=(1,)), observed({}), 2000.0)
    assert not wake_file.exists()
