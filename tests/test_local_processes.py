"""The local driver reads steps from the process table: a launcher's own fork is not a step."""

from __future__ import annotations

import os
import signal
import subprocess
import time

from reconciler.drivers.base import LAUNCHER
from reconciler.drivers.local import JOB_ENV, LocalDriver


def _children_of(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = open(f"/proc/{entry}/stat").read()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(entry))
    return out


def test_a_fork_of_the_launcher_with_its_command_line_is_not_a_second_step(tmp_path):
    d = LocalDriver(tmp_path, owner="me")
    status = tmp_path / "logs" / "agg_0.0.exit"
    status.parent.mkdir()
    # ``eval`` is a shell builtin: the launcher's background child runs it without an exec, and
    # forks again for the sleep, so it keeps the launcher's command line for as long as it runs
    # (as the launcher's fork for the worker does for a moment, before its exec)
    p = subprocess.Popen(["/bin/sh", "-c", LAUNCHER, "rcl:me:r:agg:0:0:h", str(status), "", "", "eval", "sleep 30; true"],
                         env={**os.environ, JOB_ENV: "7"}, start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        forks: list[int] = []
        while not forks and time.monotonic() < deadline:
            forks = [c for c in _children_of(p.pid)
                     if open(f"/proc/{c}/cmdline", "rb").read() == open(f"/proc/{p.pid}/cmdline", "rb").read()]
            time.sleep(0.05)
        assert forks, "the launcher's fork never showed"
        procs = d._processes()
        assert list(procs) == [f"7.{p.pid}"] and procs[f"7.{p.pid}"][:2] == (p.pid, "rcl:me:r:agg:0:0:h")
    finally:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
