"""Atomic file writes: readers see the old file or the new one, never half of one."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path


def atomic_write_text(path: Path, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o644)  # state/ is for operators to read (mkstemp would make it 0600)
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def write_if_changed(path: Path, text: str) -> bool:
    """Atomic write that skips identical content (no mtime bump for watchers); True when written."""
    try:
        if Path(path).read_text() == text:
            return False
    except FileNotFoundError:
        pass
    atomic_write_text(path, text)
    return True


class TextMemo:
    """The text this process last read or wrote per file, trusted while the file's (inode, size,
    mtime) stay as they were: a file read every tick costs one stat, and an unchanged write
    costs nothing. The controller is the only writer of what it memoises (state/ is locked);
    a hand edit or a deletion changes the signature and is read afresh."""

    def __init__(self) -> None:
        self._texts: dict[str, tuple[tuple[int, int, int], str]] = {}
        self._compact: dict[str, tuple[tuple[int, int, int], str]] = {}  # write_json_if_changed's memo

    @staticmethod
    def _sig(path: Path) -> tuple[int, int, int]:
        st = os.stat(path)
        return (st.st_ino, st.st_size, st.st_mtime_ns)

    def read_text(self, path: Path) -> str:
        """Like Path.read_text (FileNotFoundError and all)."""
        key = str(path)
        try:
            sig = self._sig(path)
        except FileNotFoundError:
            self.forget(path)  # gone: so is what we knew of it
            raise
        hit = self._texts.get(key)
        if hit is not None and hit[0] == sig:
            return hit[1]
        text = Path(path).read_text()
        # a write between the stat and the read leaves an old signature: the next read reads again
        self._texts[key] = (sig, text)
        return text

    def write_if_changed(self, path: Path, text: str) -> bool:
        try:
            if self.read_text(path) == text:
                return False
        except FileNotFoundError:
            pass
        atomic_write_text(path, text)
        self._texts[str(path)] = (self._sig(path), text)
        return True

    def json_differs(self, path: Path, data: object) -> bool:
        """False when ``data`` is what this process last wrote there and the file is untouched since."""
        try:
            sig = self._sig(path)
        except FileNotFoundError:
            self.forget(path)
            return True
        return self._compact.get(str(path)) != (sig, json.dumps(data, separators=(",", ":")))

    def write_json_if_changed(self, path: Path, data: object, indent: int = 2) -> bool:
        """Compared in compact form first (C-encoded, cheap); the indented text (Python-encoded,
        not cheap) is made only when the content changed."""
        compact = json.dumps(data, separators=(",", ":"))
        key = str(path)
        try:
            sig = self._sig(path)
        except FileNotFoundError:
            sig = None
        if sig is not None and self._compact.get(key) == (sig, compact):
            return False
        written = self.write_if_changed(path, json.dumps(data, indent=indent) + "\n")
        self._compact[key] = (self._sig(path), compact)
        return written

    def forget(self, path: Path) -> None:
        self._texts.pop(str(path), None)
        self._compact.pop(str(path), None)


def append_line(path: Path, line: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # one write() of a short line with O_APPEND is atomic with respect to other appenders
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line.rstrip("\n") + "\n").encode())
    finally:
        os.close(fd)
