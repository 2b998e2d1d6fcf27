"""The rows of ``reconciler get``: one per deployment, built from a read-only snapshot."""

from __future__ import annotations

import sys

import click

from reconciler.cli import autoscale_view, startup_view
from reconciler.errors import ReconcilerError


def wait_ready(ctl, names: tuple[str, ...], manifests: str, rows: list[dict], timeout: float) -> list[dict]:
    import time as _time

    tty = sys.stderr.isatty()
    deadline = _time.monotonic() + timeout
    last = ""
    while not all(r["status"] == "Ready" for r in rows):
        line = "waiting: " + "; ".join(
            f"{_shown(r)} {_ready_text(r)} {r['status']}" + (f" ({_why(r)})" if _why(r) else "")
            for r in rows if r["status"] != "Ready")
        if tty:
            click.echo("\r\033[K" + line[:200], nl=False, err=True)
        elif line != last:
            click.echo(line, err=True)
        last = line
        if _time.monotonic() > deadline:
            if tty:
                click.echo("", err=True)
            click.echo(f"error: not Ready after {timeout:g}s", err=True)
            return rows
        _time.sleep(1.0)
        rows = get_rows(ctl, names, manifests)
    if tty and last:
        click.echo("\r\033[K", nl=False, err=True)
    return rows


def _why(row: dict) -> str:
    for c in row["conditions"]:
        if c["type"] == "Progressing" and c["status"] == "True":
            return c["message"][:120]
    return row["error"] or ""


def _ready_text(r: dict) -> str:
    return " ".join(f"{role}:{c['ready']}/{c['desired']}" for role, c in r["roles"].items()) or "-"


def get_rows(ctl, names: tuple[str, ...], manifests: str) -> list[dict]:
    import time as _time

    from reconciler.shell.gateway.record import facts as gateway_facts
    from reconciler.shell.status import build_status

    snap = ctl.snapshot()
    sd = ctl.state
    now = _time.time()
    gone = {n: rp for n, rp in snap.plan.recipes.items() if rp.state.name in ("PRUNE_REFUSED", "TEARDOWN")}
    all_names = sorted(set(snap.desired.recipes) | set(snap.manifests.invalid) | set(snap.desired.held) | set(gone))
    if names:
        from reconciler.recipe import namespaces

        names = tuple(namespaces.from_ref(n) for n in names)  # FOLDER/NAME, or a top-level NAME
        missing = [namespaces.display(n) for n in names if n not in all_names]
        if missing:
            raise ReconcilerError(f"no recipe named {', '.join(missing)} in {manifests}")
        all_names = [n for n in all_names if n in names]
    from reconciler.cli.waits import allocation_waits
    from reconciler.shell.gates import bench_results

    queued = allocation_waits(snap.plan, snap.observed)
    rows = []
    for name in all_names:
        kept = snap.desired.kept.get(name)  # held by the prune guard: built from its last applied spec
        if name in gone and name not in snap.desired.recipes and name not in snap.manifests.invalid and not kept:
            rows.append(_gone_row(name, gone[name], snap.observed, sd.status(name), now))
            continue
        prev = sd.status(name)
        d = snap.desired.recipes.get(name) or kept
        st = build_status(name, d, snap.observed, None if kept else snap.plan.recipes.get(name),
                          snap.manifests.invalid.get(name), prev, sd.launches(name), now, sd.exits(name),
                          gateway=gateway_facts(sd.root, name))
        from reconciler.shell import reasons

        launches = sd.launches(name)
        reasons.annotate(st["workers"], d, sd.root, name, launches)
        reason, why = reasons.deployment_reason(st)
        if kept is not None:
            from reconciler.shell import prune_guard

            prune_guard.mark(st, prev, prune_guard.why(name, sd.files()), now)
            reason, why = st["reason"], st["reasonMessage"]
        from reconciler.shell import renames

        st["reason"], st["reasonMessage"] = reason, why
        renames.annotate(st, snap.manifests, sd.root, name)  # being replaced by, or replacing, a renamed one
        reason, why = st["reason"], st["reasonMessage"]
        created = _parse_iso(st["createdAt"])
        invalid = snap.manifests.invalid.get(name) or snap.desired.held.get(name)
        rows.append({
            **_identity(name), "status": st["phase"] if not invalid else (
                "Invalid" if name in snap.manifests.invalid else "Error"),
            "roles": {r: c for r, c in st["roles"].items() if r != "frontend"}, "replicas": st.get("replicas"),
            "endpoint": st["endpoint"], "servedModel": st.get("servedModel"),
            "restarts": sum(w["restarts"] for w in st["workers"]),
            "age_seconds": int(now - created) if created else None, "conditions": st["conditions"],
            "error": invalid, "waitingForAllocation": queued.get(name),
            "reason": reason or ("InvalidSpec" if invalid else None), "reasonMessage": why,
            "nodes": sorted({n for w in st["workers"] for n in w["nodes"]}),
            "pendingAllocations": st.get("pendingAllocations", []),
            "autoscale": autoscale_view.summary(sd, name, st["roles"]),
            "startup": startup_view.read(sd, name),
            "benchmark": bench_results.brief(bench_results.last(sd.root, name)),
            "warning": st.get("warning"),
        })
    return rows


def _gone_row(name: str, rp, observed, prev: dict, now: float) -> dict:
    """A recipe that still runs but has no manifest: being torn down, or kept by the prune guard."""
    roles: dict[str, dict[str, int]] = {}
    for s in observed.steps_of(name):
        if s.rank == 0 and s.role != "frontend":
            c = roles.setdefault(s.role, {"desired": 0, "ready": 0, "running": 0, "unavailable": 0})
            c["running"] += 1
    refused = rp.state.name == "PRUNE_REFUSED"
    created = _parse_iso(prev.get("createdAt"))
    return {
        **_identity(name), "status": "ManifestMissing" if refused else "Terminating", "roles": roles,
        "endpoint": prev.get("endpoint"), "servedModel": prev.get("servedModel"), "restarts": sum(w.get("restarts", 0) for w in prev.get("workers", [])),
        "age_seconds": int(now - created) if created else None, "conditions": [],
        "error": ("manifest missing: kept running by the prune guard (" + rp.detail + ")") if refused else None,
        "waitingForAllocation": None, "reason": None, "reasonMessage": None,
        "nodes": sorted({n for w in prev.get("workers", []) for n in w.get("nodes", [])}),
    }


# kubectl's Deployment columns: READY per role (ready/desired workers at the desired spec), UP-TO-DATE
# (workers running the current spec) and AVAILABLE (workers serving now, old lives of a rollout included)
HEADER = ("NAME", "READY", "UP-TO-DATE", "AVAILABLE", "STATUS", "REASON", "RESTARTS", "AGE", "ENDPOINT")
WIDE = ("MODEL", "NODES", "STARTUP", "MESSAGE")  # MODEL: what clients send as "model"; STARTUP: p90 per role


def _identity(key: str) -> dict:
    """A row's identity: its folder under manifests/ (namespace, '' at the top) and its name; ``key``
    is how the state directory and the labels spell the pair (reconciler.recipe.namespaces)."""
    from reconciler.recipe import namespaces

    ns, name = namespaces.split(key)
    return {"name": name, "namespace": ns, "key": key}


def _shown(r: dict) -> str:
    return f"{r['namespace']}/{r['name']}" if r.get("namespace") else r["name"]


def table_rows(rows: list[dict], wide: bool = False, spaced: bool | None = None) -> list[tuple[str, ...]]:
    """``spaced``: a NAMESPACE column first (by default once any row is in a folder)."""
    spaced = any(r.get("namespace") for r in rows) if spaced is None else spaced
    out = []
    for r in rows:
        cells = ((r.get("namespace") or "-",) if spaced else ()) + (
            r["name"], _ready_text(r), _count(r, "upToDate"), _count(r, "available"), r["status"],
            r.get("reason") or "-", str(r["restarts"]),
            _age(r["age_seconds"]), r["endpoint"] or "-")
        if wide:
            cells += (r.get("servedModel") or "-", ",".join(r.get("nodes") or []) or "-",
                      startup_view.cell(r.get("startup")), r.get("reasonMessage") or "-")
        out.append(cells)
    return out


def _count(r: dict, key: str) -> str:
    """One of the status's worker totals (``replicas``); '-' for a record from before it had them."""
    n = (r.get("replicas") or {}).get(key)
    return "-" if n is None else str(n)


def print_table(rows: list[dict], manifests: str, wide: bool = False, header: bool = True) -> None:
    if not rows:
        click.echo(f"no recipes in {manifests}", err=True)
        return
    spaced = any(r.get("namespace") for r in rows)  # the column appears once a folder is used
    head = (("NAMESPACE",) if spaced else ()) + HEADER + (WIDE if wide else ())
    table = ([head] if header else []) + table_rows(rows, wide, spaced)
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    for row in table:
        click.echo("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
    for r in rows:
        if r.get("warning"):  # shown, serving, but not acted on (the prune guard holds it)
            click.echo(click.style("warning: ", fg="yellow") + f"{_shown(r)}: {r['warning']['message']}", err=True)
        elif r["error"]:
            click.echo(click.style("invalid: ", fg="red") + r["error"], err=True)
        elif r.get("reasonMessage") and not wide:
            click.echo(click.style(f"{r['reason']}: ", fg="red") + f"{_shown(r)}/{r['reasonMessage']}", err=True)
    autoscale_view.print_get(rows)
    from reconciler.cli.waits import summary

    queued = summary({_shown(r): r["waitingForAllocation"] for r in rows if r.get("waitingForAllocation") is not None})
    if queued:
        click.echo(queued, err=True)


def _parse_iso(s: str | None) -> float | None:
    import calendar
    import time as _time

    if not s:
        return None
    try:
        return calendar.timegm(_time.strptime(s, "%Y-%m-%dT%H:%M:%SZ"))
    except ValueError:
        return None


def _age(secs: int | None) -> str:
    if secs is None:
        return "-"
    for unit, n in (("d", 86400), ("h", 3600), ("m", 60)):
        if secs >= n:
            return f"{secs // n}{unit}"
    return f"{secs}s"
