"""The standby controller: a second ``reconciler run --standby`` on the same state directory (this
host or another that mounts it) waits for the active one's lock and takes over when it ends.

The lease is the lock on state/run.lock (``flock``; on NFS the kernel maps it onto POSIX locks,
which the lock manager releases when the holder's process or host dies). The kernel drops it
the moment the active process dies, kill -9 included; the standby polls every second, so it
takes over within a second or two and adopts everything from the cluster (labels) and state/
like any restarted controller: nothing is launched twice. While it waits it says so in
state/standby.json, which ``get`` reads with controller.json to show who is active.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path

from reconciler.errors import ReconcilerError
from reconciler.fsutil import atomic_write_text
from reconciler.timefmt import iso



def _log():
    """structlog on first use: `get` imports describe() and must not pay ~0.7 s for it."""
    import structlog

    return structlog.get_logger("reconciler")

POLL = 1.0  # seconds between attempts: the takeover comes within this of the active one's death
STANDBY = "standby.json"


def wait_for_lease(lock: Callable[[], None], root: Path, stopped: Callable[[], bool],
                   sleep: Callable[[float], object] = time.sleep, poll: float = POLL) -> bool:
    """Take the lock (``lock`` raises ReconcilerError while another holds it), waiting as the
    standby until then. False: stopped while waiting."""
    said = False
    mine = root / STANDBY
    while not stopped():
        try:
            lock()
        except ReconcilerError as e:
            if not said:
                _log().info("standby: waiting for the active reconciler", holder=str(e))
                said = True
            try:
                atomic_write_text(mine, json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                                    "since": iso(time.time())}) + "\n")
            except OSError:
                pass  # the wait goes on without the note
            sleep(poll)
            continue
        try:
            if json.loads(mine.read_text()).get("pid") == os.getpid():
                mine.unlink()
        except (OSError, ValueError):
            pass
        if said:
            _log().warning("standby: the active reconciler is gone; taking over")
        return True
    return False


def describe(root: Path) -> str:
    """One line for ``get``: which controller is active (it holds the lock), which waits."""
    def read(name: str) -> dict:
        try:
            data = json.loads((root / name).read_text())
            return data if isinstance(data, dict) else {}
        except (OSError, ValueError):
            return {}

    held = False
    try:
        with open(root / "run.lock") as f:  # noqa: PTH123 - never created here (get writes nothing)
            try:
                fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
                fcntl.flock(f, fcntl.LOCK_UN)
            except BlockingIOError:
                held = True
    except OSError:
        pass
    active = read("controller.json")
    line = (f"controller: active pid {active.get('pid', '?')} on {active.get('host', '?')} "
            f"(last pass {active.get('lastTick', '?')})" if held else "controller: none running")
    standby = read(STANDBY)
    if held and standby:
        line += f"; standby pid {standby.get('pid', '?')} on {standby.get('host', '?')} since {standby.get('since', '?')}"
    return line
