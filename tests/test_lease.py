"""The lease's heartbeat (issue 48, item 8): a standby takes over from an active controller that is
alive but made no pass within the term (``kill -STOP``, a hung pass), the stopped one is fenced
(it acts on nothing and writes nothing once it resumes), and ``get`` warns past the term. The
real-Slurm takeover is in tests/test_standby.py; here the files and a memory driver."""

from __future__ import annotations

import json
import os
import time

import pytest

from reconciler.drivers.memory import MemoryDriver
from reconciler.shell.lease import DEFAULT_TERM, Lease, LeaseLost, describe, wait_for_lease
from reconciler.shell.loop import Controller

RECIPE = "name: {name}\nmodel: {{path: m}}\nengine: mocker\nfrontend: {{type: none}}\nroles: {{agg: {{workers: 1, gpus: 1}}}}\n"


def _manifests(tmp_path):
    """Two deployments: two submissions to fence between."""
    m = tmp_path / "manifests"
    m.mkdir()
    for name in ("r", "s"):
        (m / f"{name}.yaml").write_text(RECIPE.format(name=name))
    return m


def _age(root, seconds: float) -> None:
    """The holder's last pass ended ``seconds`` ago."""
    t = time.time() - seconds
    os.utime(root / "run.lock", (t, t))


def _standby(root, stops_after: int = 5) -> tuple[Lease, list[float], bool]:
    lease = Lease(root)
    waits: list[float] = []
    asked = iter(range(stops_after + 1))
    took = wait_for_lease(lease.acquire, root, lambda: next(asked) >= stops_after, waits.append,
                          seize=lease.seize, term=DEFAULT_TERM)
    return lease, waits, took


def test_a_standby_seizes_the_lease_of_a_holder_past_its_term_and_fences_it(tmp_path):
    active = Lease(tmp_path)
    active.acquire()
    _age(tmp_path, DEFAULT_TERM + 1)
    standby, waits, took = _standby(tmp_path)
    assert took and waits == [], "taken over at the first look, not after waiting for a death"
    assert standby.ours() and not active.ours()
    assert (tmp_path / "run.lock").read_text() == f"{os.getpid()}\n"
    with pytest.raises(LeaseLost, match="another reconciler"):
        active.keep()  # the stopped one resumes: it cannot lock the new file
    assert standby.ours(), "the fenced holder took nothing back"


def test_a_standby_leaves_a_holder_within_its_term_or_the_longer_recorded_one(tmp_path):
    active = Lease(tmp_path)
    active.acquire()
    _age(tmp_path, DEFAULT_TERM - 5)
    _, waits, took = _standby(tmp_path)
    assert not took and len(waits) == 5 and active.ours(), "a heartbeat within the term: wait"
    (tmp_path / "run.json").write_text(json.dumps({"leaseTimeout": 120}))
    _age(tmp_path, 60)  # past the standby's own 30 s, within the active run's recorded 120 s
    _, _, took = _standby(tmp_path)
    assert not took and active.ours()
    _age(tmp_path, 121)
    _, _, took = _standby(tmp_path)
    assert took and not active.ours()


def test_each_pass_touches_the_heartbeat_and_sleeps_within_a_third_of_the_term(tmp_path):
    m = _manifests(tmp_path)
    c = Controller(m, tmp_path / "state", MemoryDriver(host="node0"))
    c.debounce = 0
    c.lock()
    c.lease.term = 9.0
    _age(c.state.root, 100)
    assert c.step(60.0) <= 3.0
    assert time.time() - os.stat(c.state.root / "run.lock").st_mtime < 50, "the pass beat"


class _Stopped(MemoryDriver):
    """The active controller stopped (kill -STOP) after its first submission; a standby seized the
    lease meanwhile; then it resumes."""

    def __init__(self, root) -> None:
        super().__init__(host="node0")
        self.root = root
        self.submits = 0
        self.standby = Lease(root)  # held: a lease let go of is free to take back

    def submit(self, spec):
        self.submits += 1
        if self.submits == 1:
            self.standby.seize()
        return super().submit(spec)


def test_a_controller_that_lost_the_lease_mid_pass_acts_on_nothing_more_and_writes_nothing(tmp_path):
    m = _manifests(tmp_path)
    state = tmp_path / "state"
    drv = _Stopped(state)
    c = Controller(m, state, drv)
    c.debounce = 0
    c.lock()
    snap = c.snapshot()
    assert len(snap.plan.actions) >= 2, snap.plan.actions  # more than one action to fence
    with pytest.raises(LeaseLost):
        c.step(5.0)
    assert drv.submits == 1 and len(drv.allocs) == 1, "the action after the seizure was not taken"
    assert c._stop.is_set()
    assert not (state / "controller.json").exists(), "no progress recorded over the new holder's"
    assert not (state / "r" / "status.json").exists(), "no status recorded"


def test_a_lease_lost_while_the_pass_looked_is_noticed_before_any_action(tmp_path):
    m = _manifests(tmp_path)
    state = tmp_path / "state"
    drv = MemoryDriver(host="node0")
    c = Controller(m, state, drv)
    c.debounce = 0
    c.lock()
    look = c.snapshot
    standby = Lease(state)  # held: a lease let go of is free to take back

    def stopped_while_looking():
        snap = look()
        standby.seize()
        return snap

    c.snapshot = stopped_while_looking
    with pytest.raises(LeaseLost):
        c.step(5.0)
    assert drv.allocs == {} and not (state / "controller.json").exists()


def test_get_warns_when_the_last_pass_is_older_than_the_term(tmp_path):
    active = Lease(tmp_path)
    active.acquire()
    (tmp_path / "controller.json").write_text(json.dumps({"pid": 7, "host": "h", "lastTick": "t"}))
    _age(tmp_path, 5)
    assert "WARNING" not in describe(tmp_path)
    _age(tmp_path, 70)
    line = describe(tmp_path)
    assert "active pid 7" in line and "WARNING: the active controller made no pass for 70s (lease term 30s)" in line
    (tmp_path / "run.json").write_text(json.dumps({"leaseTimeout": 90}))
    assert "WARNING" not in describe(tmp_path), "the active run's own term"
    active.file.close()
    _age(tmp_path, 500)
    assert "WARNING" not in describe(tmp_path), "nobody holds the lock: nothing is late"
