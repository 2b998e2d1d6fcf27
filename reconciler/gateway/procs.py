"""nginx's processes as /proc shows them: what the reconciler (a master on its host) and the agent
(a master in a gateway job) both need to clean up after a master killed with SIGKILL."""

from __future__ import annotations

import os
import signal
from pathlib import Path

WORKER = b"nginx: worker process"


def children_of(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except (OSError, ValueError):
        return []


def cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def quit_nginx_workers(pids) -> list[int]:
    """SIGQUIT to those of ``pids`` that are nginx workers (each closes its listener at once and
    finishes what it carries); the ones told."""
    told = []
    for pid in pids:
        try:
            if WORKER in cmdline(pid):
                os.kill(pid, signal.SIGQUIT)
                told.append(pid)
        except OSError:
            continue
    return told
