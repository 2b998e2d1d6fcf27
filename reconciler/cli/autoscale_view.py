"""What `get` and `describe` show of an autoscaled deployment (read from state/<recipe>/autoscale.json).

`get`: per role, like an HPA: desired (the autoscaler's count) / current (Ready), [min, max]
and what it measured last. `describe`: the last decisions with the inputs they were made on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:  # read commands import no more than they use (structlog comes with drivers.state)
    from reconciler.drivers.state import StateDir

FILE = "autoscale.json"


def read(sd: StateDir, name: str) -> dict | None:
    doc = sd.read_json(sd.path_of(name, FILE), None, lambda d: isinstance(d, dict))
    return doc if doc and isinstance(doc.get("last"), dict) else None


def summary(sd: StateDir, name: str, roles: dict) -> dict | None:
    """role -> {desired, current, min, max, draining, reason} (None: not autoscaled, or not decided yet).
    ``current`` is the Ready count of this very look; desired is the autoscaler's last decision."""
    doc = read(sd, name)
    if doc is None:
        return None
    out = {}
    for role, last in doc["last"].items():
        if not isinstance(last, dict):
            continue
        out[role] = {"desired": last.get("target"), "current": serving_ready((roles.get(role) or {}).get("ready"), last),
                     "min": last.get("min"), "max": last.get("max"), "draining": last.get("draining") or [],
                     "reason": last.get("reason"), "at": last.get("at"), "coming": last.get("coming") or [],
                     "held": last.get("held", 0), "spares": spares(last)}
    return out or None


def spares(last: dict) -> list[dict]:
    """The role's warm spares at the last look: [{name, ready}] (out of the routers)."""
    return [s for s in last.get("spares") or [] if isinstance(s, dict)]


def serving_ready(ready: int | None, last: dict) -> int | None:
    """The Ready workers that serve: a Ready warm spare is Ready but serves nobody (the spares' readiness
    as of the autoscaler's last look); the last look's own count without a Ready count now."""
    if not isinstance(ready, int):
        return last.get("ready")
    return max(0, ready - sum(1 for s in spares(last) if s.get("ready")))


def print_get(rows: list[dict]) -> None:
    for r in rows:
        auto = r.get("autoscale")
        if not auto:
            continue
        parts = [f"{role} {a['desired']} desired / {a['current']} current [{a['min']}-{a['max']}]"
                 + (f" draining {','.join(a['draining'])}" if a["draining"] else "")
                 + (f" spares {','.join(s['name'] for s in a['spares'])}" if a.get("spares") else "")
                 + (f" ({len(a['coming'])} waiting for Slurm)" if a.get("coming") else "")
                 + (f" ({a['held']} request(s) held at the gateway)" if a.get("held") else "")
                 for role, a in auto.items()]
        click.echo(f"autoscale {r['name']}: " + "; ".join(parts))


def print_describe(doc: dict | None) -> None:
    if not doc:
        return
    click.echo("Autoscale:")
    for role, last in doc["last"].items():
        inputs = " ".join(f"{k}={v}" for k, v in (last.get("inputs") or {}).items())
        click.echo(f"  {role}: desired {last.get('target')} (built {last.get('built')}), ready {last.get('ready')}, "
                   f"[{last.get('min')}-{last.get('max')}]; last look {last.get('at')}: {last.get('reason')}"
                   + (f" [{inputs}]" if inputs else ""))
        for line in last.get("coming") or []:
            click.echo(f"    coming: {line}")
        if spares(last):
            click.echo("    warm spares (out of the routers): " + ", ".join(
                f"{s.get('name')} ({'Ready' if s.get('ready') else 'starting'})" for s in spares(last)))
    for d in doc.get("decisions") or []:
        inputs = " ".join(f"{k}={v}" for k, v in (d.get("inputs") or {}).items())
        click.echo(f"  {d.get('at')} {d.get('role')} {d.get('from')} -> {d.get('to')}: {d.get('reason')}"
                   + (f" [{inputs}]" if inputs else ""))
