"""What `run` decided at start (state/run.json), so read commands see what `run` sees.

`get`, `describe`, `plan`, `events`, `logs`, `suspend` and `resume` rebuild nothing from their own
guesses: without a flag they take the running reconciler's instance, port range, driver,
manifests directory and cluster config from here; with a flag that disagrees they warn (the
flag wins: it is what the user asked for, but what they see is then not what `run` does).
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from pathlib import Path
from typing import Any

from reconciler.fsutil import atomic_write_text
from reconciler.timefmt import iso

FILE = "run.json"
KEYS = ("instance", "portRange", "driver", "manifests", "state", "clusterConfig", "uiAddr", "metricsAddr",
        "leaseTimeout")


def write(state: Path, settings: dict[str, Any]) -> None:
    """Record `run`'s settings (absolute paths: a read command may run from another directory)."""
    doc = {k: settings.get(k) for k in KEYS} | {"pid": os.getpid(), "startedAt": iso(time.time())}
    atomic_write_text(Path(state) / FILE, json.dumps(doc, indent=2) + "\n")


def read(state: Path) -> dict[str, Any] | None:
    """The recorded settings, or None (no `run` ever ran here, or a file we cannot read)."""
    try:
        doc = json.loads((Path(state) / FILE).read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def run_alive(state: Path) -> bool:
    """Whether a `run` holds this state directory's lock now (flock: gone with its process)."""
    path = Path(state) / "run.lock"
    try:
        f = open(path)  # noqa: SIM115 - closed below
    except OSError:
        return False
    try:
        fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        f.close()
    return False


def same(key: str, ours: Any, theirs: Any) -> bool:
    """Whether a flag's value means what the recorded one means (paths compared resolved)."""
    if ours is None or theirs is None:
        return ours == theirs
    if key in ("manifests", "state", "clusterConfig"):
        return Path(ours).resolve() == Path(theirs).resolve()
    return str(ours) == str(theirs)
