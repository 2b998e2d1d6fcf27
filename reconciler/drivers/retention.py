"""What keeps state/ bounded: events.jsonl rotated at a size, and the directories of deleted
recipes removed after a retention.

Without them a long-lived reconciler's events grew without end, and every recipe that ever
existed kept its directory (status, launch records, logs, gateway files): 517 directories after
500 files came and went.
"""

from __future__ import annotations

import calendar
import os
import shutil
import threading
import time
from pathlib import Path

import structlog

log = structlog.get_logger("reconciler")

EVENTS = "events.jsonl"
# events.jsonl past this becomes events.jsonl.1 (the one before goes): at most twice this on disk
EVENTS_MAX_BYTES = 16 << 20
# a deleted recipe's directory is kept this long after its deletion, and only for the most recent
# DELETED_KEEP deletions (its logs are what one reads after a deletion; they go with it)
DELETED_RETENTION = 24 * 3600.0
DELETED_KEEP = 100


def rotate(path: Path, max_bytes: int, lock: threading.Lock) -> bool:
    """Past ``max_bytes``, ``path`` becomes ``<path>.1`` and the next append starts a new file (the
    event fold sees another file and starts afresh). A line another thread appends during the
    rename lands in either file: none is lost. Whether it rotated."""
    try:
        if os.stat(path).st_size < max_bytes:
            return False
    except OSError:
        return False
    with lock:
        try:
            if os.stat(path).st_size < max_bytes:
                return False  # another thread rotated it meanwhile
            os.replace(path, path.with_name(path.name + ".1"))
        except OSError as e:
            log.error("cannot rotate the events file", path=str(path), error=str(e))
            return False
    return True


def remove_expired(root: Path, deleted: dict[str, str], now: float, retention: float, keep: int) -> list[str]:
    """``deleted``: recipe -> when it was deleted (an ISO time, its status's ``deletedAt``). Removes
    state/<recipe> of those deleted more than ``retention`` seconds ago or beyond the ``keep`` most
    recent deletions, except while a gateway master still runs there (it is stopped first, by the
    gateway's pass; the directory goes at a later one). The names removed."""
    when = {name: _epoch(at) for name, at in deleted.items()}
    newest = sorted(deleted, key=lambda n: (when[n], n), reverse=True)
    removed = []
    for i, name in enumerate(newest):
        if i < keep and now - when[name] <= retention:
            continue
        where = root / name
        if where.parent != root or _alive(where / "gateway" / "nginx.pid"):
            continue  # a name that is no single directory of state/ is never removed
        try:
            shutil.rmtree(where)  # symlinks inside are removed, never followed
        except OSError as e:
            log.error("cannot remove a deleted recipe's state directory", recipe=name, error=str(e))
            continue
        removed.append(name)
    return removed


def _epoch(at: str) -> float:
    """An ISO time (timefmt.iso) as seconds; 0 (long ago) for anything else."""
    try:
        return float(calendar.timegm(time.strptime(at, "%Y-%m-%dT%H:%M:%SZ")))
    except (TypeError, ValueError):
        return 0.0


def _alive(pid_file: Path) -> bool:
    try:
        pid = int(pid_file.read_text().strip())
    except (OSError, ValueError):
        return False
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except PermissionError:
        return True  # another user's process: alive
    except OSError:
        return False
    return True
