"""A failing reconcile pass is visible (issue 32, item 4): a condition on every deployment, one
event per episode, the failure metrics, and a fresh ``lastTick`` in controller.json.

An in-memory driver stands in for Slurm here (the pass fails the way the Slurm driver's does:
a ``DriverError`` out of ``observe``); nothing is torn down while passes fail.
"""

from __future__ import annotations

import json

from prometheus_client import generate_latest

from reconciler.drivers import DriverError
from reconciler.drivers.memory import MemoryDriver
from reconciler.shell.loop import Controller
from reconciler.shell.metrics import Metrics

RECIPE = "name: r\nmodel: {path: m}\nengine: mocker\nfrontend: {type: none}\nroles: {agg: {workers: 1, gpus: 1}}\n"


class DownSlurm(MemoryDriver):
    """squeue fails while ``down`` (slurmctld stopped), counted as the Slurm driver counts it."""

    def __init__(self) -> None:
        super().__init__(host="node0")
        self.down = False
        self.tally: dict = {}

    def observe(self):
        if self.down:
            self.tally[("squeue", False)] = self.tally.get(("squeue", False), 0) + 1
            raise DriverError("squeue -h failed (exit 1): slurm_load_jobs error: Unable to contact slurm controller")
        return super().observe()


class Clock:
    def __init__(self) -> None:
        self.t = 1_800_000_000.0

    def __call__(self) -> float:
        return self.t


def _events(state) -> list[dict]:
    return [json.loads(l) for l in (state / "events.jsonl").read_text().splitlines()]


def test_failing_passes_are_a_condition_an_event_per_episode_metrics_and_a_fresh_last_tick(tmp_path):
    from collections import Counter

    m = tmp_path / "manifests"
    m.mkdir()
    (m / "r.yaml").write_text(RECIPE)
    drv = DownSlurm()
    c = Controller(m, tmp_path / "state", drv)
    c.debounce = 0
    clock = c.clock = Clock()
    c.metrics = Metrics()
    drv.tally = Counter()
    for _ in range(2):
        c.step(5.0)
    steps = dict(drv.steps)
    assert steps
    drv.down = True
    for i in range(3):
        clock.t += 10
        c.step(5.0)
    progress = json.loads((tmp_path / "state" / "controller.json").read_text())
    assert progress["tickFailures"] == 3 and "Unable to contact slurm controller" in progress["lastError"]
    assert progress["lastTick"].startswith("2027-01-15T08:00:30")  # the last failed pass, not the last good one
    failing = [e for e in _events(tmp_path / "state") if e["kind"] == "TickFailing"]
    assert len(failing) == 1 and failing[0]["reason"] == "SlurmUnreachable"  # once per episode
    st = json.loads((tmp_path / "state" / "r" / "status.json").read_text())
    cond = next(x for x in st["conditions"] if x["type"] == "TickFailing")
    assert cond["status"] == "True" and cond["reason"] == "SlurmUnreachable" and "3 in a row" in cond["message"]
    text = generate_latest(c.metrics.registry).decode()
    assert "reconciler_tick_failures_total 3.0" in text
    assert 'reconciler_slurm_commands_total{outcome="failed",verb="squeue"} 3.0' in text
    assert drv.steps == steps  # serving goes on: nothing cancelled
    drv.down = False
    clock.t += 10
    c.step(5.0)
    assert json.loads((tmp_path / "state" / "controller.json").read_text())["tickFailures"] == 0
    st = json.loads((tmp_path / "state" / "r" / "status.json").read_text())
    assert all(x["type"] != "TickFailing" for x in st["conditions"])
    assert [e["kind"] for e in _events(tmp_path / "state")].count("TickRecovered") == 1
    drv.down = True  # a new episode: a new event
    clock.t += 10
    c.step(5.0)
    assert [e["kind"] for e in _events(tmp_path / "state")].count("TickFailing") == 2
