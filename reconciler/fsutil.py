"""State files: atomic writes (readers see the old file or the new one, never half of one), private
to the reconciler's user (files 0600, directories 0700) and never written through a symlink.

state/ holds recipes' text (their secrets among it), logs and the gateway's request bodies: no other
user of the login node may read it. A symlink planted inside a state directory (by anyone who could
write there) would make the reconciler, or a program it starts as its user (slurmstepd for the
output files, nginx), write where the link points: every directory below a guarded root is checked
on the way down and a symlink is refused (``LinkRefused``), never followed. The root itself may be a
symlink: that is the operator's choice of where state/ lives.
"""

from __future__ import annotations

import json
import os
import stat
import tempfile
from pathlib import Path
from typing import BinaryIO

_ROOTS: set[str] = set()  # state directories whose insides are checked (guard)
_USER_UMASK: int | None = None  # the umask the process was started with (private_umask)


class LinkRefused(OSError):
    """A symlink where the reconciler writes: refused, not followed."""


def guard(root: Path) -> None:
    """Writes below ``root`` (through this module) refuse symlinks on the way down."""
    _ROOTS.add(os.path.abspath(root))


def _root_of(path: str) -> str | None:
    """The nearest guarded root above ``path`` (a walk up its parents: as many roots as tests make)."""
    cur = os.path.dirname(path)
    while True:
        if cur in _ROOTS:
            return cur
        up = os.path.dirname(cur)
        if up == cur:
            return None
        cur = up


def private_umask() -> None:
    """Everything this process creates from now on is its user's alone (umask 077); the umask it was
    started with is kept for the engines it launches (``user_umask``)."""
    global _USER_UMASK
    old = os.umask(0o077)
    if _USER_UMASK is None:
        _USER_UMASK = old


def user_umask() -> int:
    """The umask the reconciler was started with: the engines' files are theirs to share as before."""
    if _USER_UMASK is not None:
        return _USER_UMASK
    try:  # read, not set-and-restored: another thread would create files with a wrong mask meanwhile
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022


def private_root(root: Path) -> None:
    """The state directory itself: made (0700) or narrowed to 0700 when it is ours, and guarded."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    st = os.stat(root)
    if st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) & 0o077:
        os.chmod(root, 0o700)
    guard(root)


def private_dirs(directory: Path, root: Path | None = None) -> None:
    """``directory`` and its parents up to ``root`` (or a guarded root above it) as real directories,
    made 0700; a symlink among those below the root is refused."""
    d = os.path.abspath(directory)
    top = os.path.abspath(root) if root is not None else _root_of(d)
    if top is None or not d.startswith(top + os.sep):
        os.makedirs(d, mode=0o700, exist_ok=True)
        return
    os.makedirs(top, mode=0o700, exist_ok=True)
    cur = top
    for part in d[len(top) + 1:].split(os.sep):
        cur = os.path.join(cur, part)
        try:
            st = os.lstat(cur)
        except FileNotFoundError:
            try:
                os.mkdir(cur, 0o700)
            except FileExistsError:
                pass  # made meanwhile: checked below like any other
            st = os.lstat(cur)
        if stat.S_ISLNK(st.st_mode):
            raise LinkRefused(f"{cur} is a symbolic link: the reconciler does not write through one "
                              f"(remove it; state/ is the reconciler's alone)")
        if not stat.S_ISDIR(st.st_mode):
            raise NotADirectoryError(f"{cur} is not a directory")
        if stat.S_IMODE(st.st_mode) & 0o077 and st.st_uid == os.geteuid():
            os.chmod(cur, 0o700)  # made by a release before, or by hand: narrowed on the way


def _open_private(path: Path, flags: int, root: Path | None) -> int:
    private_dirs(Path(path).parent, root)
    try:
        fd = os.open(path, flags | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as e:
        if os.path.islink(path):  # ELOOP
            raise LinkRefused(f"{path} is a symbolic link: the reconciler does not write through one "
                              f"(remove it; state/ is the reconciler's alone)") from None
        raise e
    st = os.fstat(fd)
    if stat.S_IMODE(st.st_mode) & 0o077 and st.st_uid == os.geteuid():
        os.fchmod(fd, 0o600)  # an older release's 0644 file: narrowed when next written
    return fd


def private_file(path: Path, root: Path | None = None) -> None:
    """Make ``path`` a regular file of ours (0600) if it is not one yet: a program that opens it
    afterwards (slurmstepd, with append or truncate) finds it and keeps its mode, and a symlink
    planted there is refused."""
    os.close(_open_private(path, os.O_WRONLY, root))


def open_append(path: Path, root: Path | None = None) -> BinaryIO:
    """``open(path, "ab")`` made 0600, refusing a symlink."""
    return os.fdopen(_open_private(path, os.O_WRONLY | os.O_APPEND, root), "ab")


def atomic_write_text(path: Path, text: str) -> None:
    path = Path(path)
    private_dirs(path.parent)
    # mkstemp makes it 0600: the replace then puts a private regular file where a symlink may have been
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
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
    # one write() of a short line with O_APPEND is atomic with respect to other appenders
    fd = _open_private(Path(path), os.O_WRONLY | os.O_APPEND, None)
    try:
        os.write(fd, (line.rstrip("\n") + "\n").encode())
    finally:
        os.close(fd)
