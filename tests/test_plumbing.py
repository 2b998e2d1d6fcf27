"""Plumbing that only the Slurm e2e tests reached before: each test here fails when the one call it
is about is removed (issue 47, mutation-checked by hand):

- the autoscaler: requests held at the gateway's holder are demand (a deployment at zero wakes up);
- the Slurm watch: Slurm's expected start of a pending job reaches the core (``Observed.pending``);
- the lease: a standby waits for the active controller's lock, says so, and takes over;
- the executor: a relaunched unit's canary starts again (no answer of its last life stands)."""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

from fakes import FakeCluster, recipe
from reconciler.core.plan import plan
from reconciler.desired.build import build
from reconciler.desired.scale import Scale
from reconciler.drivers.state import StateDir
from reconciler.errors import ReconcilerError
from reconciler.world import Alloc, Desired, Observed

ZERO = """\
name: r
model: {path: /m}
resources: {gpus_per_node: 8}
engine: mocker
frontend: {type: builtin}
roles: {agg: {workers: 1, gpus: 1}}
reconcile:
  autoscale:
    scale_to_zero_after_seconds: 60
    roles: {agg: {min: 0, max: 2, target: {waiting_per_worker: 4}}}
"""


def _at_zero(tmp_path: Path):
    """A scale-to-zero recipe whose one role the autoscaler has taken to 0, converged on a fake
    cluster: (its snapshot at t=1000, the state directory)."""
    from reconciler.shell.manifests import Manifests
    from reconciler.shell.snapshot import Snapshot

    r = recipe(ZERO)
    state = StateDir(tmp_path / "state")
    (state.root / "r").mkdir(parents=True)
    (state.root / "r" / "autoscale.json").write_text(json.dumps(
        {"roles": {"agg": {"built": 0, "target": 0, "last_busy": 0.0}}}))  # idle for 1000 s: zero holds
    c = FakeCluster()
    scale = {"r": Scale({"agg": 0})}
    for _ in range(20):
        full = build({"r": r}, Observed(tuple(c.allocs.values()), tuple(c.steps.values())), c.ports, state.root,
                     "py", 1, scale=scale)
        p = plan(full, c.observed(full), 0.0)
        if not p.actions:
            break
        c.apply(p)
    assert not [u for u in full.recipes["r"].units if u.role == "agg"], "built at zero workers"
    return Snapshot(Manifests(recipes={"r": r}), full, c.observed(full), p, c.ports, (), (), 1000.0), state


def _decide_with_held(tmp_path: Path, monkeypatch, held: int) -> dict:
    from reconciler.shell.elastic import autoscale
    from reconciler.shell.gateway import holder_supervisor
    from reconciler.shell.readiness import probe

    snap, state = _at_zero(tmp_path)
    # no engine or frontend page answers (nothing runs): the holder's counters are the only signal
    monkeypatch.setattr(probe, "fetch_all", lambda urls: dict.fromkeys(urls))
    monkeypatch.setattr(holder_supervisor, "demand", lambda root, name: {"held": held, "received": held})
    moved = autoscale.Autoscaler(state).after_tick(snap)
    doc = json.loads((state.root / "r" / "autoscale.json").read_text())
    return {"moved": moved, "target": doc["roles"]["agg"]["target"], "last": doc["last"]["agg"]}


def test_requests_held_at_the_gateway_wake_a_deployment_at_zero(tmp_path, monkeypatch):
    woke = _decide_with_held(tmp_path / "a", monkeypatch, held=2)
    assert woke["moved"] and woke["target"] == 1, woke
    assert woke["last"]["held"] == 2 and "wake-up" in woke["last"]["reason"], woke
    # the control: nothing held, nothing else asks for it, it stays at zero
    idle = _decide_with_held(tmp_path / "b", monkeypatch, held=0)
    assert not idle["moved"] and idle["target"] == 0, idle


class _Squeue:
    """The driver's ``squeue --start`` answer for pending jobs (what SlurmDriver.pending_starts gives)."""

    def __init__(self, starts: dict[str, tuple[float | None, str]]):
        self.starts, self.asked = starts, []

    def pending_starts(self, jobs: list[str]) -> dict[str, tuple[float | None, str]]:
        self.asked.append(list(jobs))
        return {j: self.starts[j] for j in jobs if j in self.starts}


def test_slurms_expected_start_of_a_pending_job_reaches_the_core(tmp_path):
    from reconciler.shell.cluster.slurm_watch import SlurmWatch

    pending = Alloc("7", "r", 0, 0, 1, "PENDING", reason="Priority", submitted=990.0)
    running = Alloc("8", "r", 1, 1, 1, "RUNNING", nodes=("n1",), submitted=980.0)
    driver = _Squeue({"7": (1840.0, "Resources")})
    w = SlurmWatch(StateDir(tmp_path), driver)
    w.refresh([pending, running], Desired(recipes={}), 1000.0)
    assert driver.asked == [["7"]], "only the pending job is asked about"
    info = w.pending([pending, running])
    assert set(info) == {"7"}
    assert info["7"].start == 1840.0 and info["7"].submitted == 990.0 and info["7"].index == 0
    assert "in 14m" in info["7"].explain(1000.0), info["7"].explain(1000.0)


def _flock(path: Path):
    """The active controller's hold on run.lock (an open file description of its own, as another
    process would have)."""
    f = open(path, "a+")  # noqa: SIM115 - held until the test releases it
    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return f


def test_the_standby_waits_for_the_lock_says_so_and_takes_over(tmp_path):
    from reconciler.shell.lease import POLL, STANDBY, describe, wait_for_lease

    active = _flock(tmp_path / "run.lock")
    (tmp_path / "controller.json").write_text(json.dumps({"pid": 4242, "host": "h", "lastTick": "t"}))
    mine: list = []

    def lock() -> None:  # the standby's attempt, as Controller.lock makes it: one try, no wait
        f = open(tmp_path / "run.lock", "a+")  # noqa: SIM115
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.close()
            raise ReconcilerError("another reconciler (pid 4242) is running") from None
        mine.append(f)

    waits: list[float] = []

    def sleep(seconds: float) -> None:  # the standby's wait between two attempts
        waits.append(seconds)
        note = json.loads((tmp_path / STANDBY).read_text())
        assert note["pid"] == os.getpid(), note
        assert f"standby pid {os.getpid()}" in describe(tmp_path)
        if len(waits) == 3:
            active.close()  # the active controller dies: the kernel drops its lock

    asked: list[int] = []

    def stopped() -> bool:  # never stopped; bounded, so that a standby that does not wait ends the test
        asked.append(1)
        return len(asked) > 10

    assert wait_for_lease(lock, tmp_path, stopped, sleep) is True
    assert waits == [POLL] * 3, "one attempt a poll while the lock is held, then the takeover"
    assert len(mine) == 1 and not (tmp_path / STANDBY).exists(), "the lock is the standby's; its note is gone"
    mine[0].close()


def test_a_standby_stopped_while_waiting_never_takes_the_lock(tmp_path):
    from reconciler.shell.lease import wait_for_lease

    active = _flock(tmp_path / "run.lock")
    tries: list[int] = []

    def lock() -> None:
        tries.append(1)
        assert len(tries) < 10, "still trying after it was stopped"
        raise ReconcilerError("held")

    stop = iter([False, False, True])
    assert wait_for_lease(lock, tmp_path, lambda: next(stop), lambda s: None) is False
    assert len(tries) == 2
    active.close()


WORKER = """\
name: r
model: {path: m}
engine: mocker
frontend: {type: none}
roles: {agg: {workers: 1, gpus: 1}}
"""


def test_a_relaunched_unit_starts_with_no_canary_answer(tmp_path):
    """A relaunch keeps the unit's port: without a new life, its last life's passing canary answer
    would make the new process Ready before it ever answered. The executor starts the new life for
    every unit it launches (rank 0); a worker stands in for the frontend here, since the memory
    driver's processes never serve, so a frontend (launched once its workers are Ready) never starts."""
    from reconciler.drivers.memory import MemoryDriver
    from reconciler.shell.loop import Controller
    from reconciler.shell.readiness import canary

    m = tmp_path / "manifests"
    m.mkdir()
    (m / "r.yaml").write_text(WORKER)
    driver = MemoryDriver(host="node0")
    ctl = Controller(m, tmp_path / "state", driver)
    ctl.debounce = 0
    for _ in range(3):
        snap, _ = ctl.tick()
    (u,) = snap.desired.recipes["r"].units
    (step,) = driver.steps.values()
    at = (u.key, u.nodes[0], u.health_port or 0, u.slot)
    lives = ctl.observer.probes.canaries.lives  # this controller's own
    lives[at] = canary._Life(0.0, answered=True, answer=None)  # its last life passed
    try:
        del driver.steps[step.step_id]  # the process ends; the next passes relaunch it
        for _ in range(3):
            ctl.tick()
        relaunched = list(driver.steps.values())
        assert len(relaunched) == 1 and relaunched[0].step_id != step.step_id, "relaunched"
        assert at not in lives, "the new life has no answer yet"
    finally:
        lives.pop(at, None)
