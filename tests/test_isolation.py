"""Fault isolation in the shell: what fails for one recipe fails for that recipe only.

An in-memory driver stands in for Slurm here (a pure unit test of the shell); the same
property on the real Slurm is tests/test_e2e.py::test_corrupt_state_of_one_recipe_*.
"""

from __future__ import annotations

import itertools
import json

from reconciler.shell.loop import Controller
from reconciler.world import Alloc, Step

RECIPE = "name: {name}\nmodel: {{path: m}}\nengine: mocker\nfrontend: {{type: none}}\nroles: {{agg: {{workers: 1, gpus: 1, restart: {{backoff_seconds: 0}}}}}}\n"


class MemoryDriver:
    name = "memory"
    owner = "test"

    def __init__(self, poison: str, error: Exception):
        self.poison, self.error = poison, error
        self.allocs: dict[str, Alloc] = {}
        self.steps: dict[str, Step] = {}
        self.commands = 0
        self._ids = itertools.count(1)

    def observe(self):
        return list(self.allocs.values()), list(self.steps.values())

    def submit(self, spec):
        job = str(next(self._ids))
        self.allocs[job] = Alloc(job, spec.recipe, spec.index, spec.start, spec.count, "RUNNING", "None",
                                 tuple(f"node{i}" for i in range(spec.count)))
        return job

    def launch(self, job_id, unit, launch, step_name):
        if unit.recipe == self.poison:
            raise self.error
        sid = f"{job_id}.{next(self._ids)}"
        self.steps[sid] = Step(sid, unit.recipe, unit.role, unit.index, launch.rank, unit.spec_hash, launch.nodes)

    def cancel_step(self, step_id):
        self.steps.pop(step_id, None)

    def cancel_alloc(self, job_id):
        self.allocs.pop(job_id, None)

    def reap(self):
        pass


def test_an_unexpected_error_in_one_recipe_leaves_the_others_converging(tmp_path):
    m = tmp_path / "manifests"
    m.mkdir()
    for name in ("good", "poison"):
        (m / f"{name}.yaml").write_text(RECIPE.format(name=name))
    drv = MemoryDriver("poison", ValueError("embedded null byte"))
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
    class Down(MemoryDriver):
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
    drv = MemoryDriver("none", ValueError())
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
