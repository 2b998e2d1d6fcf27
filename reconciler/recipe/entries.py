"""Directory entries that look like recipes but are no files: refused with what they are, never
read (a FIFO would block the reader for good) and never passed over in silence."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

RECIPE_SUFFIXES = (".yaml", ".yml")  # what a recipe file's name ends in (the loader's list too)


def not_regular(path: Path) -> str | None:
    """Why ``path`` is no file a recipe can be read from (a FIFO would block the reader for good,
    a symlink loop or a dangling link cannot be read), or None."""
    try:
        mode = path.stat().st_mode
    except OSError as e:
        if e.errno == errno.ELOOP:
            return "a symlink loop"
        if path.is_symlink():
            return f"a symlink to nothing ({os.readlink(path)})"
        return None  # missing or unreadable: the read says so
    for test, what in ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return what
    return None


def skipped_entries(directory: Path) -> dict[str, str]:
    """*.yaml/*.yml entries under ``directory`` that ``iter_recipe_files`` passes over because they
    are not files: path -> what they are (``run`` says so, once, instead of nothing)."""
    out: dict[str, str] = {}
    for f in sorted(directory.rglob("*")):
        if f.suffix not in RECIPE_SUFFIXES or any(part.startswith(".") for part in f.relative_to(directory).parts):
            continue
        if f.is_dir():
            continue
        why = not_regular(f)
        if why:
            out[str(f)] = why
    return out
