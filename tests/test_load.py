"""The test harness's own rules for a busy host: the load factor it stretches waits by, and the tick
count it waits on after a restart."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import load
from harness import Harness


def test_the_load_factor_is_measured_once_bounded_and_can_be_set(monkeypatch):
    monkeypatch.delenv(load.ENV, raising=False)
    calls: list[int] = []
    monkeypatch.setattr(load, "measure", lambda: calls.append(1) or 2.5)
    assert load.factor() == 2.5 and load.scaled(10) == 25.0
    assert load.factor() == 2.5 and calls == [1], "measured once, then read from the environment"
    monkeypatch.setenv(load.ENV, "0.3")
    assert load.factor() == 1.0, "never shorter than the wait as written"


def test_the_calibration_sees_cpu_hogs():
    """Twice as many busy loops as cores: a process gets a third of a core at most, so the loop
    runs at least about twice as slow as its fastest burst."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2 * (os.cpu_count() or 1))]
    try:
        assert load.measure() >= 1.8
    finally:
        for p in hogs:
            p.kill()
            p.wait()


def test_a_restarted_reconcilers_ticks_count_from_its_own_first(tmp_path):
    """The file of the killed controller (its pid, its count) is not the new one's: waiting for one
    more tick than it counted waited for the new process to reach the old count."""
    h = Harness(tmp_path, "local")
    h.state.mkdir()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    (h.state / "controller.json").write_text(json.dumps({"pid": gone.pid, "ticks": 40}))
    h.proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert h.ticks() == 0, "the old process's count"
        (h.state / "controller.json").write_text(json.dumps({"pid": h.proc.pid, "ticks": 2}))
        assert h.ticks() == 2
    finally:
        h.proc.kill()
        h.proc.wait()
