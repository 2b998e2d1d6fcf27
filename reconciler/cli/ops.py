"""Day-to-day commands: describe, events, logs, suspend, resume (kubectl / flux habits)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import click

from reconciler.recipe import namespaces
from reconciler.cli import autoscale_view, describe_recorded, operate, startup_view
from reconciler.cli import run_settings
from reconciler.cli.common import DRIVER_OPT, INSTANCE_OPT, MANIFESTS_OPT, PORTS_OPT, STATE_OPT, _controller, _fail
from reconciler.cli.term import clean
from reconciler.errors import ReconcilerError
from reconciler.timefmt import iso

OUTPUT_OPT = click.option("-o", "--output", type=click.Choice(["text", "json"]), default="text")


def _snapshot_doc(manifests: str, state: str, driver: str | None, port_range: str, instance: str | None,
                  name: str) -> dict:
    """describe's document: status, units with their retry times, allocations, recent events."""
    from reconciler.shell.gateway.record import facts as gateway_facts
    from reconciler.shell.status import build_status
    from reconciler.cli.context import resolve

    v = resolve(state, manifests=manifests, driver=driver, port_range=port_range, instance=instance)
    manifests, driver, port_range, instance = v["manifests"], v["driver"], v["port_range"], v["instance"]
    ctl = _controller(manifests, state, driver, port_range=port_range, instance=instance, read_only=True)
    snap = ctl.snapshot()
    known = set(snap.desired.recipes) | set(snap.manifests.invalid) | set(snap.desired.held)
    if name not in known and name not in {a.recipe for a in snap.observed.allocs}:
        raise ReconcilerError(f"no recipe named {name} in {manifests} (known: {', '.join(sorted(known)) or 'none'})")
    sd, rp = ctl.state, snap.plan.recipes.get(name)
    kept = snap.desired.kept.get(name)  # held by the prune guard: shown from its last applied spec
    d = snap.desired.recipes.get(name) or kept
    st = build_status(name, d, snap.observed, None if kept else rp, snap.manifests.invalid.get(name),
                      sd.status(name), sd.launches(name), snap.now, sd.exits(name),
                      gateway=gateway_facts(sd.root, name)) if rp else {}
    from reconciler.shell import describe_facts, reasons

    reasons.annotate(st.get("workers", []), d, sd.root, name, sd.launches(name))
    if kept is not None:
        from reconciler.shell import prune_guard

        prune_guard.mark(st, sd.status(name), prune_guard.why(name, sd.files()), snap.now)
    # the facts `run` records for describe, built from this snapshot and shown the same way
    f = describe_facts.facts(snap, name)
    workers = st.get("workers", [])
    describe_recorded.annotate(workers, f["units"])
    from reconciler.shell.gates import bench_results

    bench = {"state": f["benchmarkState"], "last": bench_results.last(sd.root, name)}
    from reconciler.shell import renames

    if st:
        renames.annotate(st, snap.manifests, sd.root, name)  # the endpoint a new name is to take over
    why = renames.reason(snap.manifests, name, st.get("endpoint"))
    return {"name": name, "phase": st.get("phase", "Unknown"), "endpoint": st.get("endpoint"),
            "rename": {"reason": why[0], "message": why[1]} if why else None,
            "servedModel": st.get("servedModel") or sd.status(name).get("servedModel"),
            "benchmark": bench if bench["state"] or bench["last"] else None,
            "suspended": f["suspended"], "warning": st.get("warning"), "error": f["error"],
            "conditions": st.get("conditions", []), "units": workers,
            "allocations": describe_recorded.allocations(f["allocations"], snap.now),
            "events": operate.read_events(Path(state), name)[-20:],
            "lastAllocationLost": sd.read_json(sd.recipe_dir(name) / "allocation-lost.json", None,
                                               lambda x: isinstance(x, dict)),
            "quarantinedNodes": {n: {"until": iso(q.until), "why": q.why} for n, q in ctl.slurm.quarantined.items()},
            "autoscale": autoscale_view.read(sd, name), "startup": startup_view.read(sd, name)}


@click.command()
@click.argument("name")
@MANIFESTS_OPT
@STATE_OPT
@DRIVER_OPT
@PORTS_OPT
@INSTANCE_OPT
@OUTPUT_OPT
def describe(name: str, manifests: str, state: str, driver: str | None, port_range: str, instance: str | None,
             output: str) -> None:
    """One deployment in full: conditions, every worker and service, allocations, the last 20 events."""
    key = namespaces.from_ref(name)
    # while a `run` holds the state directory it records all of this after each pass: read it
    doc = describe_recorded.doc(Path(state), key, time.time()) if run_settings.run_alive(Path(state)) else None
    if doc is None:
        try:
            doc = _snapshot_doc(manifests, state, driver, port_range, instance, key)
        except ReconcilerError as e:
            _fail(str(e))
    from reconciler import config_record as cluster_config  # what run has in force (state/cluster-config.json)

    doc["clusterConfig"] = cluster_config.recorded(Path(state))
    if output == "json":
        click.echo(json.dumps(doc, indent=2))
        return
    doc = clean(doc)  # file names, messages, log lines: escape sequences shown escaped (cli/term.py)
    click.echo(click.style(f"Name: {namespaces.display(doc['name'])}", bold=True) + f"   Phase: {doc['phase']}"
               + (f"   Endpoint: {doc['endpoint']}" if doc["endpoint"] else "")
               + (f"   Model: {doc['servedModel']}" if doc.get("servedModel") else ""))
    if doc.get("warning"):
        click.echo(click.style(f"Warning: {doc['warning']['reason']}: ", fg="yellow") + doc["warning"]["message"])
    if doc.get("rename"):  # a file whose name: changed (docs/operations.md, "Renaming a deployment")
        click.echo(f"Rename: {doc['rename']['reason']}: {doc['rename']['message']}")
    if doc["error"]:
        click.echo(click.style("Error: ", fg="red") + doc["error"])
    click.echo(f"Cluster config: {cluster_config.line(doc['clusterConfig'])}")
    click.echo("Conditions:")
    for c in doc["conditions"]:
        click.echo(f"  {c['type']:<12} {c['status']:<6} {c['reason']:<18} {c['message']}  (since {c['lastTransitionTime']})")
    rows = [("UNIT", "NODES", "PORTS", "PHASE", "REASON", "RESTARTS", "LAST EXIT", "NEXT RETRY")]
    for u in doc["units"]:
        ex = u.get("lastExit")
        rows.append((u["name"], ",".join(u["nodes"]) or "-", " ".join(f"{k}={v}" for k, v in u["ports"].items()) or "-",
                     u["phase"], u.get("reason") or "-", str(u["restarts"]), f"{ex['code']} at {ex['at']}" if ex else "-",
                     u["nextRetry"] or (u["waiting"] or "-")))
    click.echo("Units:")
    _table(rows, "  ")
    for u in doc["units"]:
        if u.get("message"):
            click.echo(f"  {u['name']}: " + click.style(u["reason"], fg="red") + f": {u['message']}")
    click.echo("Allocations:")
    if not doc["allocations"]:
        click.echo("  none")
    for a in doc["allocations"]:
        click.echo(f"  job {a['job']} (allocation {a['index']}): {a['state']}"
                   + (f", reason {a['reason']}" if a["reason"] and a["reason"] != "None" else "")
                   + (f", nodes {','.join(a['nodes'])}" if a["nodes"] else "")
                   + (f", time left {a['timeLeft']}" if a["timeLeft"] else "")
                   + (f" of {a['timeLimit']} granted" if a.get("timeLimit") and a["timeLeft"] else ""))
        if a.get("endsWhy"):
            click.echo(f"    must end by {a['endsBy']}: {a['endsWhy']}")
        if a.get("message"):  # pending: Slurm's reason in words and its expected start
            click.echo(f"    {a['message']}")
    for node, q in doc["quarantinedNodes"].items():
        click.echo(f"  node {node} quarantined until {q['until']}: {q['why']}")
    if doc["lastAllocationLost"]:
        lost = doc["lastAllocationLost"]
        click.echo(f"  last lost: {lost['message']} (at {lost['at']})")
    autoscale_view.print_describe(doc["autoscale"])
    startup_view.print_describe(doc.get("startup"))
    if doc["benchmark"]:
        from reconciler.shell.gates.bench_results import line

        b = doc["benchmark"]
        click.echo("Benchmark:" + (f" {b['state']}" if b["state"] else ""))
        click.echo("  last: " + (line(b["last"]) if b["last"] else "none yet"))
    click.echo("Events:")
    for e in doc["events"] or []:
        click.echo("  " + operate.event_line(e))
    if not doc["events"]:
        click.echo("  none")


def _table(rows: list[tuple[str, ...]], indent: str) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        click.echo(indent + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())


@click.command()
@click.argument("name", required=False)
@STATE_OPT
@click.option("-f", "--follow", is_flag=True, help="Keep printing new events (Ctrl-C stops).")
@click.option("--since", help="Only events newer than this (90s, 5m, 1h30m, 2d).")
@OUTPUT_OPT
def events(name: str | None, state: str, follow: bool, since: str | None, output: str) -> None:
    """What the reconciler did and saw, oldest first (all recipes, or NAME's)."""
    name = namespaces.from_ref(name) if name else name
    try:
        cut = time.time() - operate.parse_duration(since) if since else None
    except ValueError as e:
        _fail(f"--since: {e}")
    if follow:
        try:  # JSON lines when following: one object per event as it comes
            for e in operate.follow_events(Path(state), name, cut):
                click.echo(json.dumps(operate.event_as_written(e)) if output == "json" else operate.event_line(e))
        except KeyboardInterrupt:
            return
    evs = operate.read_events(Path(state), name, cut)
    if output == "json":
        click.echo(json.dumps([operate.event_as_written(e) for e in evs], indent=2))
        return
    for e in evs:
        click.echo(operate.event_line(e))
    if not evs:
        click.echo(f"no events{' for ' + namespaces.display(name) if name else ''}{' in the last ' + since if since else ''}", err=True)


@click.command()
@click.argument("name")
@click.argument("role", required=False)
@click.argument("index", type=click.IntRange(min=0), default=None, required=False)
@click.option("-r", "--role", "role_opt", default=None, help="The role (decode, prefill, agg, frontend, a service).")
@click.option("-i", "--index", "index_opt", type=click.IntRange(min=0), default=None, help="The worker index (default 0).")
@STATE_OPT
@click.option("--rank", type=click.IntRange(min=0), default=0, show_default=True,
              help="The node rank of a multi-node worker.")
@click.option("-f", "--follow", is_flag=True, help="Keep printing new output; follows the next life after a relaunch.")
@click.option("-p", "--previous", is_flag=True, help="The life before the last relaunch.")
@click.option("--tail", "tail_n", type=click.IntRange(min=0), default=None,
              help="Only the last N lines (before following).")
def logs(name: str, role: str | None, index: int | None, role_opt: str | None, index_opt: int | None, state: str,
         rank: int, follow: bool, previous: bool, tail_n: int | None) -> None:
    """A worker's or service's output: `logs NAME` (its frontend, or its only worker), `logs NAME decode 1`,
    `logs NAME -r decode -i 1`, `logs NAME etcd`."""
    from reconciler.cli.logs_pick import pick

    try:
        name = namespaces.from_ref(name)
        role, index = pick(Path(state), name, role_opt or role, index_opt if index_opt is not None else index)
        path = operate.log_path(Path(state), name, role, index, rank, previous)
    except ReconcilerError as e:
        _fail(str(e))
    text, end = operate.tail(path, tail_n)
    sys.stdout.write(text)
    sys.stdout.flush()
    if follow and not previous:
        try:
            for chunk in operate.follow(path, end):
                sys.stdout.write(chunk)
                sys.stdout.flush()
        except KeyboardInterrupt:
            return


def _set_suspended(name: str, manifests: str, state: str, on: bool) -> None:
    from reconciler.recipe.load import iter_recipe_files
    from reconciler.desired.admission import load_file
    from reconciler.drivers.state import StateDir, set_suspended
    from reconciler.cli.context import resolve

    manifests = resolve(state, manifests=manifests)["manifests"]

    name = namespaces.from_ref(name)
    in_files: dict[str, bool] = {}  # recipe key -> reconcile.suspend in its file
    for f in iter_recipe_files([manifests]) if Path(manifests).is_dir() else []:
        try:
            ns = namespaces.namespace_of_file(Path(manifests), f)
            in_files |= {namespaces.key(ns, lr.recipe.name): lr.recipe.reconcile.suspend for lr in load_file(f)}
        except (ReconcilerError, namespaces.NamespaceError):
            continue  # an invalid file: its recipe may still be known from the state directory
    known = set(in_files) | set(StateDir(Path(state), read_only=True).known_recipes())
    if name not in known:
        _fail(f"no recipe named {name} in {manifests} or {state}")
    changed = set_suspended(Path(state), name, on)
    if on:
        click.echo(f"{name} {'suspended' if changed else 'was already suspended'}: no actions are taken for it; "
                   f"what runs keeps running (`reconciler resume {name}` to resume)")
    elif in_files.get(name):
        click.echo(f"{name}: {'marker removed, but ' if changed else ''}its file sets reconcile.suspend: true, so it "
                   "stays suspended until that is changed in the file")
    else:
        click.echo(f"{name} {'resumed' if changed else 'was not suspended'}")


@click.command()
@click.argument("name")
@MANIFESTS_OPT
@STATE_OPT
def suspend(name: str, manifests: str, state: str) -> None:
    """Stop acting on NAME (nothing is torn down); `get` shows it Suspended."""
    _set_suspended(name, manifests, state, True)


@click.command()
@click.argument("name")
@MANIFESTS_OPT
@STATE_OPT
def resume(name: str, manifests: str, state: str) -> None:
    """Act on NAME again after `reconciler suspend`."""
    _set_suspended(name, manifests, state, False)


COMMANDS = (describe, events, logs, suspend, resume)
