"""What a running reconciler recorded, read back: its events and the workers its router lists."""

from __future__ import annotations

import json

from harness import Harness


def events(h: Harness, recipe: str | None = None, kind: str | None = None) -> list[dict]:
    """The events of state/events.jsonl, of one recipe and of one kind when given (none before
    the reconciler wrote its first)."""
    try:
        lines = (h.state / "events.jsonl").read_text().splitlines()
    except FileNotFoundError:
        return []
    return [e for e in map(json.loads, lines)
            if (recipe is None or e["recipe"] == recipe) and (kind is None or e["kind"] == kind)]


def routed(h: Harness, name: str) -> list[str]:
    """The workers the recipe's router lists (its endpoints file), sorted; none before it is written."""
    try:
        return sorted(w["name"] for w in json.loads((h.state / name / "endpoints.json").read_text())["workers"])
    except (FileNotFoundError, ValueError):
        return []
