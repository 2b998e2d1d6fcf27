"""state/: status, events, last-applied specs, launch records. Human-readable, atomic, a cache.

Nothing in state/ is a reason to stop: a file that does not parse, or has the wrong
shape, is moved aside as ``<file>.corrupt-<time>`` (with an event) and treated as
missing — the controller rebuilds from Slurm and the other files. A read-only
StateDir (``get``, ``plan``) treats it as missing too, but moves and writes nothing.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from reconciler.drivers import redact
from reconciler.drivers.event_fold import EventFold
from reconciler.drivers.retention import (DELETED_KEEP, DELETED_RETENTION, EVENTS, EVENTS_MAX_BYTES, remove_expired,
                                          rotate)
from reconciler.fsutil import TextMemo, append_line, guard
from reconciler.timefmt import iso

log = structlog.get_logger("reconciler")


FULL_APPLIED = "last-applied.full.yaml"  # the last applied text with its secrets (write_last_applied)


def _is_status(d: Any) -> bool:
    return isinstance(d, dict) and all(
        isinstance(d.get(k, []), list) and all(isinstance(x, dict) for x in d.get(k, []))
        for k in ("conditions", "workers"))


_RECORD_TYPES = {"launches": int, "restarts": int, "backoff": int, "lastLaunch": (int, float), "ports": dict,
                 "stoppedFor": str, "replace": bool, "spec": str, "runKey": str}


def _is_launches(d: Any) -> bool:
    return isinstance(d, dict) and all(
        isinstance(k, str) and (isinstance(v, int) or isinstance(v, dict) and all(
            isinstance(v[f], t) for f, t in _RECORD_TYPES.items() if v.get(f) is not None))
        for k, v in d.items())


def _is_files(d: Any) -> bool:
    return isinstance(d, dict) and all(
        isinstance(k, str) and (isinstance(v, str) or isinstance(v, list) and all(isinstance(n, str) for n in v))
        for k, v in d.items()
    )


@dataclass
class StateDir:
    root: Path
    read_only: bool = False  # get / plan: never move, never write
    listeners: list[Callable[[dict], None]] = field(default_factory=list)  # every event, as written
    memo: TextMemo = field(default_factory=TextMemo, repr=False)  # files read each tick cost a stat
    _valid: dict = field(default_factory=dict, repr=False)  # (path, check) -> the text that passed it
    _paths: dict = field(default_factory=dict, repr=False)
    _fold: EventFold = field(default_factory=EventFold, repr=False)  # repeated events folded (drivers/event_fold.py)
    _applied: dict = field(default_factory=dict, repr=False)  # recipe -> (its last text, its secrets, shown)
    _shown: redact.StatusRedactor = field(default_factory=redact.StatusRedactor, repr=False)  # status.json as read
    _secrets: frozenset | None = field(default=None, repr=False)  # secrets()' answer until a recipe's text changes
    events_max: int = EVENTS_MAX_BYTES
    deleted_retention: float = DELETED_RETENTION
    deleted_keep: int = DELETED_KEEP
    _rotating: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        guard(self.root)  # what is written below it refuses planted symlinks (fsutil.private_dirs)

    def recipe_dir(self, name: str) -> Path:
        return self.root / name

    def path_of(self, name: str, leaf: str) -> Path:
        """state/<name>/<leaf>, made once (the same few paths are asked for every recipe every tick)."""
        key = (name, leaf)
        path = self._paths.get(key)
        if path is None:
            path = self._paths[key] = self.root / name / leaf
        return path

    # ---------------------------------------------------------------- events
    def event(self, kind: str, recipe: str | None, message: str, **fields: Any) -> None:
        if self.read_only:
            return
        # what is said is shown (events, the status page, --notify): no secret's value in it
        known = self.secrets()
        fields = {k: redact.redact(v, known) if isinstance(v, str) else v for k, v in fields.items()}
        rec = {"time": iso(time.time()), "kind": kind, "recipe": recipe, "message": redact.redact(message, known),
               **fields}
        rotate(self.root / EVENTS, self.events_max, self._rotating)
        rec = self._fold.append(self.root / EVENTS, rec)  # said again: one line with a count
        for listen in self.listeners:  # run --notify; each must return at once
            listen(rec)

    # ---------------------------------------------------------------- json helpers
    def read_json(self, path: Path, default: Any, valid: Callable[[Any], bool] | None = None) -> Any:
        try:
            text = self.memo.read_text(path)
            data = json.loads(text)
        except FileNotFoundError:
            return default
        except (OSError, ValueError) as e:  # includes a non-UTF-8 file, a directory in its place
            return self.corrupt(path, f"{type(e).__name__}: {e}", default)
        # keyed by the check's code: a lambda made anew at each call is still the same check
        check = (str(path), getattr(valid, "__code__", valid))
        if valid is not None and self._valid.get(check) is not text:
            if not valid(data):
                return self.corrupt(path, "unexpected content (wrong types)", default)
            self._valid[check] = text  # this very text was checked: not again each tick
        return data

    def corrupt(self, path: Path, why: str, default: Any) -> Any:
        """Set a broken state file aside and carry on as if it were missing."""
        self.memo.forget(path)
        if self.read_only:
            return default
        aside = path.with_name(f"{path.name}.corrupt-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}")
        try:
            os.replace(path, aside)
        except OSError as e:
            log.error("cannot move a corrupt state file aside", path=str(path), error=str(e))
            return default
        rel = path.relative_to(self.root) if path.is_relative_to(self.root) else path
        recipe = rel.parts[0] if len(rel.parts) > 1 else None
        log.warning("corrupt state file moved aside", path=str(path), aside=aside.name, error=why)
        self.event("CorruptState", recipe, f"{rel}: {why}; moved aside to {aside.name} and rebuilt")
        return default

    def write_text(self, path: Path, text: str) -> None:
        """Atomic, and only when the content changed."""
        if not self.read_only:
            self.memo.write_if_changed(path, text)

    def write_json(self, path: Path, data: Any) -> None:
        # unchanged content is not rewritten: the router watches endpoints.json's mtime
        if not self.read_only:
            self.memo.write_json_if_changed(path, data)

    # ---------------------------------------------------------------- recipes
    def status(self, name: str) -> dict:
        return self.read_json(self.path_of(name, "status.json"), {}, _is_status)

    def status_changed(self, name: str, status: dict) -> bool:
        """Whether writing ``status`` would change the file (one compact encoding when it would not)."""
        return self.memo.json_differs(self.path_of(name, "status.json"), self.shown_status(name, status))

    def write_status(self, name: str, status: dict) -> None:
        # read by get, describe, the page and anyone on the host: an engine's refusal line quoted in
        # a condition may carry a flag's or an env value's secret
        self.write_json(self.path_of(name, "status.json"), self.shown_status(name, status))

    def shown_status(self, name: str, status: dict) -> dict:
        """``status`` as status.json shows it: its messages without the recipe's secrets."""
        seen = self._applied.get(name)
        return self._shown(name, status, seen[1] if seen else frozenset())

    def last_applied(self, name: str) -> str | None:
        """The text last applied, secrets included (what a reload of the recipe needs)."""
        full = self.path_of(name, FULL_APPLIED)
        try:
            return self.memo.read_text(full)
        except FileNotFoundError:
            pass  # no secret in it: last-applied.yaml is the whole text
        except (OSError, ValueError) as e:
            self.corrupt(full, f"{type(e).__name__}: {e}", None)
        path = self.path_of(name, "last-applied.yaml")
        try:
            return self.memo.read_text(path)
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as e:
            return self.corrupt(path, f"{type(e).__name__}: {e}", None)

    def write_last_applied(self, name: str, text: str) -> None:
        """last-applied.yaml is for people (``cat``, tickets, the page): secret values REDACTED. The
        whole text, when it differs, in last-applied.full.yaml (0600, like every state file), read
        back only to run the recipe on its last spec."""
        seen = self._applied.get(name)
        new = seen is None or seen[0] != text
        if new:  # found and redacted once per text, not every pass
            found = frozenset(redact.find(text))
            self._applied[name] = seen = (text, found, redact.redact(text, found))
            self._secrets = None
        if self.read_only:
            return
        shown = seen[2]
        full = self.path_of(name, FULL_APPLIED)
        if shown != text:
            self.memo.write_if_changed(full, text)  # first: the redacted file is never the only copy
        self.memo.write_if_changed(self.path_of(name, "last-applied.yaml"), shown)
        if new and shown == text:  # no secret (any more): no second copy
            try:
                full.unlink()
                self.memo.forget(full)
            except FileNotFoundError:
                pass

    def secrets(self) -> frozenset[str]:
        """Every secret value of the recipes written this run (redacted wherever they would show)."""
        if self._secrets is None:  # asked for each status and event: the union is made once per change
            self._secrets = frozenset().union(*(s for _, s, _ in self._applied.values()))
        return self._secrets

    def launches(self, name: str) -> dict[str, dict]:
        """unit -> {"launches": lives started, "restarts": relaunches after a failure (what users see),
        "backoff": the backoff counter (reset once healthy for a while), "lastLaunch": time,
        "ports": node -> name -> port of the current life, "stoppedFor": why we cancelled it}."""
        data = self.read_json(self.path_of(name, "launches.json"), {}, _is_launches)
        return {k: (v if isinstance(v, dict) else {"launches": int(v)}) for k, v in data.items()}

    def _write_launches(self, name: str, data: dict) -> None:
        self.write_json(self.path_of(name, "launches.json"), data)

    def count_launch(self, name: str, unit: str, now: float, restart: bool,
                     ports: dict[str, dict[str, int]] | None = None, slot: int = 0, spec: str = "",
                    run_key: str = "") -> dict:
        """Record a new life. ``restart``: the plan says it is a relaunch after a failure."""
        data = self.launches(name)
        rec = data.setdefault(unit, {})
        if spec and rec.get("spec") and rec["spec"] != spec:
            rec["backoff"] = 0  # a new spec starts a fresh backoff: the old spec's failures are not its
        if restart:
            rec["restarts"] = rec.get("restarts", 0) + 1
            rec["backoff"] = rec.get("backoff", 0) + 1
        rec["launches"] = rec.get("launches", 0) + 1
        rec["lastLaunch"] = now
        rec["slot"] = slot  # which life slot that launch was in (its exit record is that slot's)
        rec["spec"] = spec  # the spec hash launched: a run-once unit runs again only for another one
        rec["runKey"] = run_key  # a run-once unit's own definition at that launch
        rec["lastReadyAfter"] = rec.pop("readyAfter", rec.get("lastReadyAfter"))  # the last life's, kept
        rec["ports"] = ports or {}
        rec.pop("replace", None)
        rec["lastStoppedFor"] = rec.pop("stoppedFor", None)  # why the life before ended (get's REASON)
        self._write_launches(name, data)
        return rec

    def mark_stopped(self, name: str, unit: str, reason: str) -> None:
        """We cancelled the unit's current life, for ``reason`` (a StopReason value)."""
        data = self.launches(name)
        if unit in data and data[unit].get("stoppedFor") != reason:
            data[unit]["stoppedFor"] = reason
            self._write_launches(name, data)

    def note_ready_after(self, name: str, unit: str, launched: float, seconds: float) -> None:
        """How long the life launched at ``launched`` took to be Ready (kept across restarts)."""
        data = self.launches(name)
        rec = data.get(unit)
        if rec is not None and rec.get("lastLaunch") == launched and rec.get("readyAfter") is None:
            rec["readyAfter"] = round(max(0.0, seconds), 3)
            self._write_launches(name, data)

    def reset_backoff(self, name: str, unit: str) -> None:
        data = self.launches(name)
        if data.get(unit, {}).get("backoff"):
            data[unit]["backoff"] = 0
            self._write_launches(name, data)

    def prune_launches(self, name: str, keep: set[str]) -> None:
        """Forget launch counts of workers that no longer exist: a new worker starts at 0 restarts."""
        data = self.launches(name)
        kept = {k: v for k, v in data.items() if k in keep}
        if kept != data:
            self._write_launches(name, kept)

    def files(self) -> dict[str, list[str]]:
        """manifest file -> the recipes it declared when last read (a sweep declares several)."""
        data = self.read_json(self.root / "files.json", {}, _is_files)
        return {k: [v] if isinstance(v, str) else v for k, v in data.items()}

    def write_files(self, mapping: dict[str, list[str]]) -> None:
        self.write_json(self.root / "files.json", dict(sorted(mapping.items())))

    def expire_deleted(self, deleted: dict[str, str], now: float) -> list[str]:
        """``deleted``: recipe -> its status's ``deletedAt``. The directories of those deleted longer
        than ``deleted_retention`` ago, or beyond the ``deleted_keep`` most recent deletions, are
        removed, their logs with them (drivers/retention.py). The names removed."""
        if self.read_only:
            return []
        removed = remove_expired(self.root, deleted, now, self.deleted_retention, self.deleted_keep)
        for name in removed:
            self.event("StateRemoved", name, f"state/{name} removed: its recipe was deleted at "
                       f"{deleted[name] or 'an unknown time'} (kept {self.deleted_retention / 3600:g} h, "
                       f"and for the last {self.deleted_keep} deletions)")
        return removed

    def known_recipes(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(p.parent.name for p in self.root.glob("*/status.json"))

    def exits(self, name: str) -> dict[str, tuple[int, float]]:
        """unit -> (exit code, time) of its last ended life (rank 0), from the launcher's records."""
        out = {}
        logs = self.recipe_dir(name) / "logs"
        for p in logs.glob("*.0.exit") if logs.is_dir() else ():
            rec = self.exit_status(name, p.name[: -len(".0.exit")])
            if rec:
                out[p.name[: -len(".0.exit")]] = rec
        return out

    def exit_status(self, name: str, unit: str, rank: int = 0) -> tuple[int, float] | None:
        p = self.recipe_dir(name) / "logs" / f"{unit}.{rank}.exit"
        try:
            # opened each time, never from the memo: the launcher writes it on a compute node, and on
            # NFS only an open revalidates (a stat may be answered from the attribute cache)
            rc, ts = p.read_text().split()
            return int(rc), float(ts)
        except (OSError, ValueError):
            return None  # written atomically by the launcher; anything else is not a record


# ---------------------------------------------------------------- suspension (`reconciler suspend NAME`)
# One marker file per suspended recipe, written by the CLI, read by every pass: the recipe file
# stays the user's, and `reconcile.suspend: true` in it is the declarative spelling of the same.
def suspended_names(root: Path) -> frozenset[str]:
    try:
        return frozenset(p.name for p in (Path(root) / "suspended").iterdir() if p.is_file())
    except (FileNotFoundError, NotADirectoryError):
        return frozenset()


def set_suspended(root: Path, name: str, on: bool) -> bool:
    """Suspend (``on``) or resume ``name``; whether anything changed."""
    marker = Path(root) / "suspended" / name
    if on:
        if marker.exists():
            return False
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(json.dumps({"at": iso(time.time())}) + "\n")
        return True
    try:
        marker.unlink()
        return True
    except FileNotFoundError:
        return False
