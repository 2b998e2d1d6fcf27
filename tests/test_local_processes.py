"""The local driver reads steps from the process table: a launcher's own fork is not a step."""

from __future__ import annotations

import os
import signal
import subprocess
import time

from reconciler.drivers.base import LAUNCHER_BEFORE
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
    # (as the launcher's fork for the worker does for a moment, before its exec). The launcher of the
    # release before (its steps are adopted after an upgrade) runs "$@" in such a fork; this
    # release's execs it from a subshell, so a builtin cannot keep its fork alive to look at
    p = subprocess.Popen(["/bin/sh", "-c", LAUNCHER_BEFORE, "rcl:me:r:agg:0:0:h", str(status), "", "", "eval", "sleep 30; true"],
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
        ((sid, (pid, name, _start)),) = procs.items()
        assert sid.startswith("7.") and sid.endswith(f"{p.pid:07d}") and (pid, name) == (p.pid, "rcl:me:r:agg:0:0:h")
    finally:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()


def test_a_later_launch_has_a_greater_step_id_whatever_its_pid():
    """The newest life of a worker is its newest step (core/slots.py): the local driver's step ids
    grow with the launch, not with the pid, which wraps (found in a soak: a surge life with a
    smaller pid than the old one was taken for the older, and the rollout stalled for good)."""
    from reconciler.core.slots import _newest
    from reconciler.drivers.local import step_id
    from reconciler.world import Step

    old = Step(step_id("1", 31193, "5000"), "r", "agg", 0, 0, "h", slot=0)
    new = Step(step_id("1", 2229, "7000"), "r", "agg", 0, 0, "h", slot=1)  # after the pids wrapped
    assert _newest([old, new]) is new and _newest([new, old]) is new
    assert _newest([Step(step_id("1", 5, "7000"), "r", "agg", 0, 0, "h"), new]) is new  # same tick: by pid
