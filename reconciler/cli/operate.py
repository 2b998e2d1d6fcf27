"""What `describe`, `events` and `logs` read: the state directory and a read-only snapshot.

Nothing here writes; the click commands in ``cli_ops`` only format what these return.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path

from reconciler.drivers.base import step_log_paths
from reconciler.errors import ReconcilerError
from reconciler.timefmt import iso
from reconciler.world import SERVICE_PREFIX, life_name

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_UNIT = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> float:
    """'90s', '5m', '1h30m', '2d' -> seconds (a bare number is seconds)."""
    t = text.strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", t):
        return float(t)
    parts = _DURATION.findall(t)
    if not parts or "".join(n + u for n, u in parts) != t:
        raise ValueError(f"expected a duration like 90s, 5m, 1h30m or 2d, found {text!r}")
    return sum(float(n) * _UNIT[u] for n, u in parts)


# ---------------------------------------------------------------- events
def read_events(state: Path, recipe: str | None = None, since: float | None = None) -> list[dict]:
    """Events in order, the rotated file's first (events.jsonl.1: drivers/retention.py); ``since``: an
    epoch time. Lines that do not parse are skipped (a torn write)."""
    path = Path(state) / "events.jsonl"
    return [*_filter(_lines(path.with_name(path.name + ".1")), recipe, since), *_filter(_lines(path), recipe, since)]


def follow_events(state: Path, recipe: str | None, since: float | None, poll: float = 0.5) -> Iterator[dict]:
    """Every matching event, then the new ones as they are written (until the caller stops)."""
    path = Path(state) / "events.jsonl"
    offset, inode = 0, None
    while True:
        try:
            with path.open("rb") as f:
                now = os.fstat(f.fileno()).st_ino
                if f.seek(0, 2) < offset or now != inode:
                    offset = 0  # the file was replaced (rotated): read the new one from its start
                inode = now
                f.seek(offset)
                chunk = f.read()
        except FileNotFoundError:
            chunk = b""
        end = chunk.rfind(b"\n") + 1  # a line still being written waits for its newline
        offset += end
        yield from _filter(_parse(chunk[:end].decode(errors="replace").splitlines()), recipe, since)
        time.sleep(poll)


def _lines(path: Path) -> Iterator[dict]:
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return iter(())
    return _parse(text.splitlines())


def _parse(lines: list[str]) -> Iterator[dict]:
    for line in lines:
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict):
            yield rec


def _filter(events, recipe: str | None, since: float | None) -> Iterator[dict]:
    cut = iso(since) if since is not None else None
    for e in events:
        if recipe is not None and e.get("recipe") != recipe:
            continue
        if cut is not None and str(e.get("time", "")) < cut:  # ISO UTC strings sort as times
            continue
        yield e


def event_as_written(e: dict) -> dict:
    """An event for people and scripts: its recipe as users write it (FOLDER/NAME, a top-level
    recipe's name alone), with the internal key beside it when the two differ (state/ paths, labels)."""
    from reconciler.recipe import namespaces

    r = e.get("recipe")
    if not isinstance(r, str) or namespaces.display(r) == r:
        return e
    return {**e, "recipe": namespaces.display(r), "key": r}


def event_line(e: dict) -> str:
    extra = {k: v for k, v in e.items() if k not in ("time", "kind", "recipe", "message")}
    tail = " ".join(f"{k}={v}" for k, v in extra.items())
    from reconciler.recipe import namespaces

    from reconciler.cli.term import shown as safe

    shown = namespaces.display(e["recipe"]) if e.get("recipe") else "-"  # FOLDER/NAME, as users write it
    # a message may quote a file name or a log line: escape sequences shown escaped (cli/term.py)
    return safe(f"{e.get('time', '?')}  {e.get('kind', '?'):<16} {shown:<20} {e.get('message', '')}"
                + (f"  ({tail})" if tail else ""))


# ---------------------------------------------------------------- logs
def log_path(state: Path, recipe: str, role: str, index: int, rank: int = 0, previous: bool = False) -> Path:
    """The worker's (or service's) log; ``previous``: the life before the last launch (rotated to .1)."""
    from reconciler.recipe import namespaces

    if not namespaces.is_key(recipe) or not re.fullmatch(r"[a-z][a-z0-9-]{0,44}", role):
        raise ReconcilerError(f"not a recipe name and role: {namespaces.display(recipe)!r} {role!r}")
    if index < 0 or rank < 0:
        raise ReconcilerError("INDEX and --rank are 0 or more")
    units = known_units(state, recipe)
    unit = f"{role}_{index}"
    if unit not in units and f"{SERVICE_PREFIX}{role}_{index}" in units:
        unit = f"{SERVICE_PREFIX}{role}_{index}"  # `logs NAME etcd` means the etcd service
    # a unit's lives alternate between two slots (a surge life runs beside the old one): the
    # current life is the slot written last, the previous one its rotated log or the other slot
    lives = sorted((step_log_paths(state, recipe, life_name(unit, s), rank).log for s in (0, 1)), key=_mtime, reverse=True)
    log = lives[0]
    if unit not in units or not (log.exists() or log.with_name(log.name + ".1").exists()):
        have = ", ".join(sorted(units)) or "none yet"
        raise ReconcilerError(f"no log for {namespaces.display(recipe)} {unit} (rank {rank}) in {log.parent}; units with logs: {have}")
    if previous:
        prev = max((p for p in (log.with_name(log.name + ".1"), lives[1]) if p.exists()), key=_mtime, default=None)
        if prev is None:
            raise ReconcilerError(f"{namespaces.display(recipe)} {unit} has no previous life's log (it was launched once)")
        return prev
    return log


def _mtime(p: Path) -> float:
    try:
        return p.stat().st_mtime
    except OSError:
        return -1.0


def known_units(state: Path, recipe: str) -> set[str]:
    d = Path(state).absolute() / recipe / "logs"
    try:
        return {p.name.split(".")[0].removesuffix("@b") for p in d.iterdir() if ".log" in p.name}
    except FileNotFoundError:
        return set()


def tail(path: Path, n: int | None) -> tuple[str, int]:
    """The last ``n`` lines (all with None) and the byte offset read up to (where following starts)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:  # rotated away between the lookup and the read: the new life has none yet
        return "", 0
    text = data.decode(errors="replace")
    if n is not None:
        lines = text.splitlines(keepends=True)
        text = "".join(lines[-n:]) if n > 0 else ""
    return text, len(data)


def follow(path: Path, start: int, poll: float = 0.3) -> Iterator[str]:
    """New output after byte ``start``. A relaunch rotates the file: what the dying life wrote
    last is drained from the open file first, then the new life's file is followed from 0."""
    f = _open(path)
    if f is not None:
        f.seek(start)
    try:
        while True:
            if f is not None and (chunk := f.read()):
                yield chunk.decode(errors="replace")
                continue
            now = _inode(path)
            if now is not None and (f is None or now != _fd_inode(f)):
                if f is not None:
                    if rest := f.read():  # the last bytes of the old life
                        yield rest.decode(errors="replace")
                    f.close()
                    yield f"--- {path.name}: relaunched, following the new life ---\n"
                f = _open(path)
                continue
            time.sleep(poll)
    finally:
        if f is not None:
            f.close()


def _open(path: Path):
    try:
        return path.open("rb")
    except FileNotFoundError:
        return None


def _fd_inode(f) -> int:
    import os

    return os.fstat(f.fileno()).st_ino


def _inode(path: Path) -> int | None:
    try:
        return path.stat().st_ino
    except FileNotFoundError:
        return None
