"""What `get -o wide` and `describe` show of a deployment's measured startup, per role (read from
the summary in state/<recipe>/startup.json that the autoscaler's edge writes; the read commands
import no core for it)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:  # read commands import no more than they use (structlog comes with drivers.state)
    from reconciler.drivers.state import StateDir

FILE = "startup.json"


def summary(doc: Any) -> dict | None:
    """role -> {p50, p90, lives, last, routedP90, source, text}; None: no file (nothing launched yet)."""
    s = doc.get("summary") if isinstance(doc, dict) else None
    out = {role: v for role, v in s.items() if isinstance(v, dict)} if isinstance(s, dict) else {}
    return out or None


def read(sd: StateDir, name: str) -> dict | None:
    return summary(sd.read_json(sd.path_of(name, FILE), None, lambda d: isinstance(d, dict)))


def cell(s: dict | None) -> str:
    """get -o wide's STARTUP column: each role's p90 (``<=`` the budget when none was measured)."""
    if not s:
        return "-"
    return ",".join(f"{role}:{'' if v.get('lives') else '<='}{_secs(v.get('p90'))}" for role, v in sorted(s.items()))


def print_describe(s: dict | None) -> None:
    if not s:
        return
    click.echo("Startup (launch to Ready, the role's recent lives):")
    for role, v in sorted(s.items()):
        routed = f"; to the first request p90 {_secs(v['routedP90'])}" if v.get("routedP90") is not None else ""
        last = f"; last {_secs(v['last'])}" if v.get("last") is not None else ""
        click.echo(f"  {role}: {v.get('text')}{last}{routed}")


def _secs(v: Any) -> str:
    return f"{v:.0f}s" if isinstance(v, (int, float)) else "-"
