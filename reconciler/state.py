"""state/: status, events, last-applied specs. Human-readable, atomic, safe to delete."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reconciler.fsutil import append_line, write_if_changed
from reconciler.timefmt import iso


@dataclass
class StateDir:
    root: Path

    def recipe_dir(self, name: str) -> Path:
        return self.root / name

    # ---------------------------------------------------------------- events
    def event(self, kind: str, recipe: str | None, message: str, **fields: Any) -> None:
        rec = {"time": iso(time.time()), "kind": kind, "recipe": recipe, "message": message, **fields}
        append_line(self.root / "events.jsonl", json.dumps(rec, sort_keys=False))

    # ---------------------------------------------------------------- json helpers
    def read_json(self, path: Path, default: Any) -> Any:
        try:
            return json.loads(path.read_text())
        except (FileNotFoundError, ValueError):
            return default

    def write_json(self, path: Path, data: Any) -> None:
        # unchanged content is not rewritten: the router watches endpoints.json's mtime
        write_if_changed(path, json.dumps(data, indent=2, sort_keys=False) + "\n")

    # ---------------------------------------------------------------- recipes
    def status(self, name: str) -> dict:
        return self.read_json(self.recipe_dir(name) / "status.json", {})

    def write_status(self, name: str, status: dict) -> None:
        self.write_json(self.recipe_dir(name) / "status.json", status)

    def last_applied(self, name: str) -> str | None:
        try:
            return (self.recipe_dir(name) / "last-applied.yaml").read_text()
        except FileNotFoundError:
            return None

    def write_last_applied(self, name: str, text: str) -> None:
        write_if_changed(self.recipe_dir(name) / "last-applied.yaml", text)

    def launches(self, name: str) -> dict[str, dict]:
        """unit -> {"launches": lives started, "restarts": relaunches after a failure (what users see),
        "backoff": the backoff counter (reset once healthy for a while), "lastLaunch": time,
        "ports": node -> name -> port of the current life, "stoppedFor": why we cancelled it}."""
        data = self.read_json(self.recipe_dir(name) / "launches.json", {})
        return {k: (v if isinstance(v, dict) else {"launches": int(v)}) for k, v in data.items()}

    def _write_launches(self, name: str, data: dict) -> None:
        self.write_json(self.recipe_dir(name) / "launches.json", data)

    def count_launch(self, name: str, unit: str, now: float, restart: bool,
                     ports: dict[str, dict[str, int]] | None = None) -> dict:
        """Record a new life. ``restart``: the plan says it is a relaunch after a failure."""
        data = self.launches(name)
        rec = data.setdefault(unit, {})
        if restart:
            rec["restarts"] = rec.get("restarts", 0) + 1
            rec["backoff"] = rec.get("backoff", 0) + 1
        rec["launches"] = rec.get("launches", 0) + 1
        rec["lastLaunch"] = now
        rec["ports"] = ports or {}
        rec.pop("replace", None)
        rec.pop("stoppedFor", None)
        self._write_launches(name, data)
        return rec

    def mark_stopped(self, name: str, unit: str, reason: str) -> None:
        """We cancelled the unit's current life, for ``reason`` (a StopReason value)."""
        data = self.launches(name)
        if unit in data and data[unit].get("stoppedFor") != reason:
            data[unit]["stoppedFor"] = reason
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

    def files(self) -> dict[str, str]:
        return self.read_json(self.root / "files.json", {})

    def write_files(self, mapping: dict[str, str]) -> None:
        self.write_json(self.root / "files.json", dict(sorted(mapping.items())))

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
            rc, ts = p.read_text().split()
            return int(rc), float(ts)
        except (FileNotFoundError, ValueError):
            return None
