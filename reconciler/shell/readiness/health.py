"""What the controller remembers about workers between ticks: probe history and log scans.

This is the only edge-triggered memory of the reconciler, and losing it (a restart)
is safe: a worker that was Ready is probed again, a log is rescanned from the start
of the current life (logs are rotated at each launch), a restart counter comes from
state/.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from reconciler.drivers.base import step_log_paths
from reconciler.logpattern import compile_pattern
from reconciler.world import Unit

SCAN_LIMIT = 1 << 20  # bytes of new log read per worker and tick
# a log whose size did not change is not opened again for this long: on NFS a stat can come from
# the attribute cache, only an open revalidates (the node writing the log is another host)
REOPEN_SECONDS = 10.0

Key = tuple[str, str, int]


@dataclass
class Life:
    watched_since: float | None = None
    was_ready: bool = False
    ready_since: float | None = None
    first_ready: float | None = None  # the first Ready probe of this life: a flap does not reset it
    probe_failures: int = 0
    failing_since: float | None = None  # the first of the failed probes in a row
    fatal: str | None = None
    log_ready: bool = False  # a ``log`` readiness probe's pattern matched in this life
    offsets: dict[int, tuple[int, int]] = field(default_factory=dict)  # rank -> (inode, offset)
    partial: dict[int, bytes] = field(default_factory=dict)  # rank -> unterminated last line
    opened: dict[int, float] = field(default_factory=dict)  # rank -> when its log was last opened


class HealthTracker:
    def __init__(self, state_root: Path):
        self.state_root = state_root
        self.lives: dict[Key, Life] = {}
        self.missing_since: dict[Key, float] = {}

    def new_life(self, key: Key) -> None:
        self.lives.pop(key, None)
        self.missing_since.pop(key, None)

    def life(self, key: Key) -> Life:
        return self.lives.setdefault(key, Life())

    def probed(self, key: Key, ok: bool, now: float) -> None:
        life = self.life(key)
        if life.watched_since is None:
            life.watched_since = now
        if ok:
            life.was_ready = True
            life.probe_failures = 0
            life.failing_since = None
            if life.ready_since is None:
                life.ready_since = now
            if life.first_ready is None:
                life.first_ready = now
        else:
            life.ready_since = None
            if life.was_ready:
                life.probe_failures += 1
                if life.failing_since is None:
                    life.failing_since = now

    def seen_running(self, key: Key) -> None:
        self.missing_since.pop(key, None)

    def seen_missing(self, key: Key, now: float) -> float:
        return self.missing_since.setdefault(key, now)

    def scan_logs(self, unit: Unit) -> None:
        """Look for the first fatal line of this life in each rank's log (and a readiness line)."""
        # RE2 (reconciler/logpattern.py): a recipe's pattern cannot backtrack the tick into a stall
        ready_pattern = compile_pattern(unit.probe_arg) if unit.probe == "log" else None
        if not unit.fatal_patterns and ready_pattern is None:
            return
        life = self.life(unit.key)
        if life.fatal or (not unit.fatal_patterns and life.log_ready):
            return
        patterns = [compile_pattern(p) for p in unit.fatal_patterns]
        for launch in unit.launches:
            path = step_log_paths(self.state_root, unit.recipe, unit.life, launch.rank).log
            try:
                st = os.stat(path)
                inode, offset = life.offsets.get(launch.rank, (st.st_ino, 0))
                if inode != st.st_ino or st.st_size < offset:
                    offset = 0  # rotated or truncated: a new file
                    life.partial.pop(launch.rank, None)
                elif st.st_size == offset and launch.rank in life.offsets and \
                        time.monotonic() - life.opened.get(launch.rank, 0.0) < REOPEN_SECONDS:
                    continue  # nothing new since the last tick: not opened (but see REOPEN_SECONDS)
                with open(path, "rb") as f:
                    f.seek(offset)
                    data = f.read(SCAN_LIMIT)
            except OSError:
                continue
            life.offsets[launch.rank] = (st.st_ino, offset + len(data))
            life.opened[launch.rank] = time.monotonic()
            data = life.partial.pop(launch.rank, b"") + data
            lines = data.split(b"\n")
            life.partial[launch.rank] = lines.pop()[-4096:]  # keep an incomplete last line for next time
            for raw in lines:
                line = raw.decode(errors="replace").rstrip("\r")
                if ready_pattern is not None and ready_pattern.search(line):
                    life.log_ready = True
                if any(p.search(line) for p in patterns):
                    life.fatal = line
                    return
