"""drivers/exits.py: a launched process's end wakes the loop at once (not at the next resync)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading

from harness import scancel
from helpers import wait_until
from support.clusters import h  # noqa: F401 - fixtures among them
from support.recipes import KEEP

from reconciler.drivers import exits
from reconciler.drivers.exits import ExitWatch


def test_each_watched_process_wakes_once_when_it_ends(monkeypatch):
    monkeypatch.setattr(exits, "AGAIN_S", 3600)  # the second look is another test's
    woke = threading.Semaphore(0)
    w = ExitWatch()
    w.wake = woke.release
    procs = [subprocess.Popen(["sleep", "60"]) for _ in range(3)]
    try:
        for p in procs:
            w.watch(p.pid)
        assert not woke.acquire(timeout=0.3)  # all running: no wake
        procs[1].kill()
        assert woke.acquire(timeout=10)  # its end, noticed without anyone polling
        assert not woke.acquire(timeout=0.3)  # the others still run
        for p in (procs[0], procs[2]):
            p.kill()
        assert woke.acquire(timeout=10) and woke.acquire(timeout=10)
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_a_callback_that_raises_does_not_end_the_watching_of_the_others(monkeypatch):
    monkeypatch.setattr(exits, "AGAIN_S", 3600)
    woke = threading.Semaphore(0)
    w = ExitWatch()
    w.wake = woke.release

    def broken() -> None:
        raise RuntimeError("a caller's bug")

    procs = [subprocess.Popen(["sleep", "60"]) for _ in range(2)]
    try:
        w.watch(procs[0].pid, broken)
        w.watch(procs[1].pid)
        procs[0].kill()
        assert woke.acquire(timeout=10), "the loop is woken although the callback raised"
        procs[1].kill()
        assert woke.acquire(timeout=10), "and the watcher thread still watches the other"
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_no_thread_for_the_second_look_does_not_end_the_watching(monkeypatch):
    """threading.Timer.start raises when no thread can be started: the watcher goes on."""
    woke = threading.Semaphore(0)

    class NoThread(threading.Timer):
        def start(self) -> None:
            raise RuntimeError("can't start new thread")

    monkeypatch.setattr(exits.threading, "Timer", NoThread)
    w = ExitWatch()
    w.wake = woke.release
    procs = [subprocess.Popen(["sleep", "60"]) for _ in range(2)]
    try:
        w.watch(procs[0].pid)
        w.watch(procs[1].pid)
        procs[0].kill()
        assert woke.acquire(timeout=10)
        procs[1].kill()
        assert woke.acquire(timeout=10), "the watcher thread outlived the failed timer"
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_an_end_wakes_once_more_shortly_after(monkeypatch):
    """squeue may still list a step whose srun client just ended: the loop looks again."""
    monkeypatch.setattr(exits, "AGAIN_S", 0.2)
    woke = threading.Semaphore(0)
    w = ExitWatch()
    w.wake = woke.release
    p = subprocess.Popen(["sleep", "60"])
    w.watch(p.pid)
    p.kill()
    p.wait()
    assert woke.acquire(timeout=10) and woke.acquire(timeout=10)


def test_a_process_gone_before_it_is_watched_still_wakes():
    woke = threading.Event()
    w = ExitWatch()
    w.wake = woke.set
    p = subprocess.Popen(["true"])
    p.wait()  # reaped: its pid is gone
    w.watch(p.pid)
    assert woke.wait(10)


def test_without_a_loop_to_wake_nothing_is_watched(monkeypatch):
    w = ExitWatch()  # `get`, `plan`: read-only, no loop
    w.watch(1)
    assert w._thread is None


def test_at_most_max_watched_descriptors_are_held(monkeypatch):
    monkeypatch.setattr(exits, "MAX_WATCHED", 2)
    monkeypatch.setattr(exits, "AGAIN_S", 3600)
    woke = threading.Semaphore(0)
    w = ExitWatch()
    w.wake = woke.release
    procs = [subprocess.Popen(["sleep", "60"]) for _ in range(3)]
    try:
        for p in procs:
            w.watch(p.pid)
        procs[2].kill()  # the third was not watched (the limit): its end wakes nothing
        procs[2].wait()
        assert not woke.acquire(timeout=0.5)
        procs[0].kill()
        assert woke.acquire(timeout=10)
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_a_killed_step_is_relaunched_without_waiting_for_the_resync(h):
    """End to end (both drivers): with a resync of 120 s and nothing else due, a worker killed
    outside the reconciler is relaunched because its end woke the loop — the resync would be two
    minutes away. (The only frontend's gap: issue 27, benchmarks/continuity.py.)"""
    name = h.name("wake")
    (h.manifests / f"{name}.yaml").write_text(KEEP.format(name=name))
    h.start("--resync", "120")
    wait_until(lambda: _phase(h, name) == "Ready", timeout=90, what="Ready")
    first = h.steps(name)["agg_0"]
    if h.driver == "slurm":
        scancel(first[0])
    else:
        os.killpg(int(first[0]), signal.SIGKILL)
    wait_until(lambda: h.steps(name).get("agg_0", first) != first, timeout=60,
               what=f"agg_0 relaunched (log: {h.log()[-2000:]})")


def _phase(h, name: str) -> str:
    try:
        return json.loads((h.state / name / "status.json").read_text()).get("phase", "")
    except (OSError, ValueError):
        return ""
