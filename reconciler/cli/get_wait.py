"""`get --wait`: wait on the status `run` records (state/<name>/status.json), never on a plan of our own.

A plan made here with other settings than `run`'s (port range, instance, cluster config) sees
workers `run` does not: it would name replacements `run` never makes and wait for them forever.
The recorded status is what `run` decided; its ``observedGeneration`` says which version of the
file it describes, so a Ready from before an edit is not taken for the edit's Ready.

What is waited for (``--for``), as kubectl's Deployment conditions: ``available`` (the default) is the
Available condition, enough capacity serving, which a planned change keeps True while its old lives
serve; ``ready`` is the phase Ready, everything at the file's spec Ready; ``progressed`` is the rollout
finished, Progressing False with reason Converged (old lives gone, nothing left to move).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import click

from reconciler.cli import run_settings
from reconciler.drivers.state import StateDir

FOR = ("available", "ready", "progressed")
SHOWN = {"available": "Available", "ready": "Ready", "progressed": "rolled out (Progressing=False Converged)"}


def _cond(st: dict, kind: str) -> dict:
    return next((c for c in st.get("conditions") or [] if isinstance(c, dict) and c.get("type") == kind), {})


def done(st: dict, phase: str, until: str) -> bool:
    """Whether a recorded status (of the current file) meets ``until`` (one of FOR)."""
    if until == "ready":
        return phase == "Ready"
    if until == "available":
        avail = _cond(st, "Available")
        # recorded by a `run` from before the condition existed: its Ready is the nearest answer
        return avail.get("status") == "True" if avail else phase == "Ready"
    prog = _cond(st, "Progressing")
    # scaled to zero or suspended on purpose: nothing is left to roll out either
    return prog.get("status") == "False" and prog.get("reason") in ("Converged", "ScaledToZero", "Suspended")


def recorded_rows(state: Path, names: list[str], generations: dict[str, str | None],
                  until: str = "ready") -> list[dict]:
    """One row per name from `run`'s status files: phase, roles, conditions, and whether it is done."""
    sd = StateDir(Path(state), read_only=True)
    rows = []
    for name in names:
        st = sd.status(name)
        want = generations.get(name)
        seen = st.get("observedGeneration")
        current = want is None or seen == want
        phase = st.get("phase") or "Unknown"
        note = None
        if not st:
            phase, note = "Pending", "not yet seen by `run`"
        elif not current:
            note = "`run` has not applied the current file yet"
        rows.append({"name": name, "status": phase if current else "Pending", "recordedPhase": phase,
                     "roles": {r: c for r, c in (st.get("roles") or {}).items() if r != "frontend"},
                     "conditions": st.get("conditions") or [], "error": st.get("error") or note,
                     "replicas": st.get("replicas"),
                     "ready": bool(st) and current and done(st, phase, until),
                     # rollout analysis stopped this version of the file: it will not become Ready
                     "refused": next((c["message"] for c in st.get("conditions") or []
                                      if current and c.get("reason") == "RolloutFailed"), None)})
    return rows


def wait(state: Path, names: list[str], generations: dict[str, str | None], timeout: float,
         poll: float = 0.5, until: str = "ready") -> bool:
    """Block (with progress on stderr) until every recipe's recorded status meets ``until`` (one of
    FOR); False at the timeout."""
    from reconciler.cli.deployments import _ready_text, _why

    tty = sys.stderr.isatty()
    deadline = time.monotonic() + timeout
    last = ""
    warned = False
    while True:
        rows = recorded_rows(state, names, generations, until)
        # first: a refused rollout leaves the deployment Available (its old lives serve), and an
        # "apply and wait" must still hear that the file it applied will not be rolled out
        if refused := [r for r in rows if r["refused"]]:
            if tty and last:
                click.echo("", err=True)
            for r in refused:
                click.echo(f"error: {r['name']}: {r['refused']}", err=True)
            return False
        if all(r["ready"] for r in rows):
            if tty and last:
                click.echo("\r\033[K", nl=False, err=True)
            return True
        if not warned and not run_settings.run_alive(state):
            warned = True
            click.echo(click.style("warning: ", fg="yellow") + f"no `reconciler run` is running on {state}: "
                       "nothing changes the status this waits on until one starts", err=True)
        line = "waiting: " + "; ".join(
            f"{r['name']} {_ready_text(r)} {r['status']}" + (f" ({_why(r)})" if _why(r) else "")
            for r in rows if not r["ready"])
        if tty:
            click.echo("\r\033[K" + line[:200], nl=False, err=True)
        elif line != last:
            click.echo(line, err=True)
        last = line
        if time.monotonic() > deadline:
            if tty:
                click.echo("", err=True)
            click.echo(f"error: not {SHOWN[until]} after {timeout:g}s", err=True)
            return False
        time.sleep(poll)
