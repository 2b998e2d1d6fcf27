"""Repeated events folded into one line with a count, as kubectl folds a repeated event.

A worker refused at each relaunch, a recipe held each pass, wrote the same event dozens of times.
An event whose object (recipe, kind and the fields that name what it is about: node, unit) last
said the very same message is not written again: that earlier line is moved to the end of
``events.jsonl`` with ``count`` (how many times it was said), ``firstTime`` (when first) and
``time`` (when last). The file stays ordered by each line's last time, as ``kubectl get events``
sorts by lastTimestamp; ``events -f`` sees the folded line again as a new one.

Only a line in the file's last ``TAIL`` bytes is moved (its rewrite is bounded); one further back, or
a file changed behind this writer's back (rotated, appended to by another process), gets a new line
that carries the count on. Only the process that holds the state directory writes events.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

from reconciler.fsutil import append_line

TAIL = 64 << 10
IDENTITY = ("node", "unit", "path")  # fields that say which object an event is about, beside its recipe


@dataclass
class _Last:
    message: str
    count: int
    first: str  # time of the first of the run
    offset: int  # where its line starts in the file
    length: int  # its line's bytes, newline included


@dataclass
class EventFold:
    last: dict[tuple, _Last] = field(default_factory=dict)  # object -> its last event's line
    end: tuple[int, int] | None = None  # (inode, size) of the file after this writer's last write
    lock: threading.Lock = field(default_factory=threading.Lock)

    def append(self, path: Path, rec: dict) -> dict:
        """Write ``rec`` (folded into the object's previous line when it says the same); returns the
        record as written (with ``count`` and ``firstTime`` when folded)."""
        key = (rec.get("recipe"), rec.get("kind"), *(str(rec.get(k)) for k in IDENTITY))
        with self.lock:
            prev = self.last.get(key)
            st = _stat(path)
            if self.end is None or st != self.end:  # rotated or written by someone else: start afresh
                self.last.clear()
                prev = None
            if prev is not None and prev.message == rec.get("message"):
                rec = {**rec, "count": prev.count + 1, "firstTime": prev.first}
                if st is not None and st[1] - prev.offset <= TAIL and self._move_to_end(path, prev, rec):
                    return rec
            line = json.dumps(rec, sort_keys=False)
            append_line(path, line)
            st2 = _stat(path)
            size = st2[1] if st2 else 0
            length = len(line.encode()) + 1
            self.last[key] = _Last(rec.get("message", ""), int(rec.get("count", 1)), rec.get("firstTime", rec["time"]),
                                   size - length, length)
            self.end = st2
            return rec

    def _move_to_end(self, path: Path, prev: _Last, rec: dict) -> bool:
        """Take the object's earlier line out of the file's tail and write it anew at the end."""
        try:
            with open(path, "r+b") as f:
                f.seek(prev.offset)
                rest = f.read()
                old, after = rest[:prev.length], rest[prev.length:]
                if not old.endswith(b"\n") or json.loads(old).get("message") != prev.message:
                    return False  # not the line remembered: leave the file as it is
                line = (json.dumps(rec, sort_keys=False) + "\n").encode()
                f.seek(prev.offset)
                f.write(after + line)
                f.truncate()
                size = f.tell()
        except (OSError, ValueError):
            return False
        for other in self.last.values():  # the lines after it moved up by its length
            if other.offset > prev.offset:
                other.offset -= prev.length
        prev.count, prev.offset, prev.length = rec["count"], size - len(line), len(line)
        self.end = _stat(path)
        return True


def _stat(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_size
