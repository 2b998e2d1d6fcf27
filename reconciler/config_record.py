"""What `run` records of the cluster config in force (state/cluster-config.json), read back for
describe and the status page. A leaf: describe answers from the record without importing the
config's loader (shell/cluster_config.py writes the file)."""

from __future__ import annotations

import json
from pathlib import Path

FILE = "cluster-config.json"


def recorded(state: Path) -> dict | None:
    """What ``run`` has in force, from state/ (describe, the status page); None before any record."""
    try:
        data = json.loads((Path(state) / FILE).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def line(rec: dict | None) -> str:
    """One line for people: the file and version in force, and a refused rewrite."""
    if not rec or not rec.get("path"):
        head = "none"
    else:
        head = f"{rec['path']} (sha256 {rec['sha256']}, modified {rec['modified']})"
    return head + (f"; a rewrite was refused: {rec['error']}" if rec and rec.get("error") else "")
