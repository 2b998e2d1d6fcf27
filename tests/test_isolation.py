"""Fault isolation in the shell: what fails for one recipe fails for that recipe only.

An in-memory driver stands in for Slurm here (a pure unit test of the shell); the same
property on the real Slurm is tests/test_e2e.py::test_corrupt_state_of_one_recipe_*.
"""

from __future__ import annotations

import json

from reconciler.shell.loop import Controller
from reconciler.drivers.memory import MemoryDriver

RECIPE = "name: {name}\nmodel: {{path: m}}\nengine: mocker\nfrontend: {{type: none}}\nroles: {{agg: {{workers: 1, gpus: 1, restart: {{backoff_seconds: 0}}}}}}\n"


class PoisonDriver(MemoryDriver):
    """Launches of the ``poison`` recipe raise ``error``."""

    def __init__(self, poison: str, error: Exception):
        super().__init__(host="node0")
        self.poison, self.error = poison, error

    def on_launch(self, unit, launch):
        if unit.recipe == self.poison:
            raise self.error


def test_an_unexpected_error_in_one_recipe_leaves_the_others_converging(tmp_path):
    m = tmp_path / "manifests"
    m.mkdir()
    for name in ("good", "poison"):
        (m / f"{name}.yaml").write_text(RECIPE.format(name=name))
    drv = PoisonDriver("poison", ValueError("embedded null byte"))
    c = Controller(m, tmp_path / "state", drv)
    c.debounce = 0  # files written just now are applied at once (the debounce has its own test)
    for _ in range(3):
        c.tick()
    assert {s.recipe for s in drv.steps.values()} == {"good"}
    (victim,) = list(drv.steps)
    del drv.steps[victim]  # the healthy recipe's worker dies while the other keeps failing
    for _ in range(2):
        snap, _ = c.tick()
    assert {s.recipe for s in drv.steps.values()} == {"good"} and victim not in drv.steps
    events = [json.loads(l) for l in (tmp_path / "state" / "events.jsonl").read_text().splitlines()]
    failed = [e for e in events if e["kind"] == "ActionFailed"]
    assert failed and all(e["recipe"] == "poison" and "embedded null byte" in e["message"] for e in failed)
    assert snap.plan.recipes["poison"].deferred  # backing off, not hammering
    assert c.tick_failures == 0


def test_a_tick_that_fails_as_a_whole_is_retried_with_backoff(tmp_path):
    class Down(PoisonDriver):
        def observe(self):
            raise RuntimeError("squeue: error: slurm_load_jobs error: Unable to contact slurm controller")

    m = tmp_path / "manifests"
    m.mkdir()
    c = Controller(m, tmp_path / "state", Down("x", ValueError()))
    waits = []
    c.sleep = lambda t: waits.append(t) or (len(waits) >= 4 and c.stop())  # record the loop's sleeps
    c.run(resync=5.0)
    assert waits == [1.0, 2.0, 4.0, 8.0] and c.tick_failures == 4


def test_a_file_still_being_written_is_not_applied_until_it_is_still(tmp_path):
    import os
    import time

    m = tmp_path / "manifests"
    m.mkdir()
    f = m / "good.yaml"
    f.write_text(RECIPE.format(name="good"))
    drv = PoisonDriver("none", ValueError())
    c = Controller(m, tmp_path / "state", drv)
    snap, done = c.tick()
    assert not done and str(f) in snap.manifests.settling  # just written: wait
    old = time.time() - 5
    os.utime(f, (old, old))
    c.tick()
    c.tick()
    assert {s.recipe for s in drv.steps.values()} == {"good"}
    running = dict(drv.steps)
    # a half-written edit (valid YAML, a line missing) is not applied while it is fresh ...
    f.write_text(RECIPE.format(name="good").replace("frontend: {type: none}\n", ""))
    snap, done = c.tick()
    assert not done and drv.steps == running and snap.desired.recipes["good"].frontend is None
    # ... and the spec applied meanwhile is the last good one
    assert snap.manifests.recipes["good"].frontend.type == "none"
