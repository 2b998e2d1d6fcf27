"""`reconciler get`: deployments as a table (or json, yaml, wide), once, watched (-w), or waited on."""

from __future__ import annotations

import json
import sys
import time

import click

from reconciler.cli.common import DRIVER_OPT, INSTANCE_OPT, MANIFESTS_OPT, PORTS_OPT, STATE_OPT, _controller, _fail
from reconciler.errors import ReconcilerError

# what a watch prints a row again for (AGE alone changing is not news)
WATCHED = ("status", "reason", "restarts", "endpoint", "roles", "replicas")


@click.command()
@click.argument("names", nargs=-1)
@MANIFESTS_OPT
@STATE_OPT
@DRIVER_OPT
@PORTS_OPT
@INSTANCE_OPT
@click.option("-o", "--output", type=click.Choice(["text", "wide", "json", "yaml"]), default="text",
              help="wide: also the nodes and why a deployment is down.")
@click.option("--wait", "wait_ready", is_flag=True,
              help="Wait until `run` records every listed recipe Available, or what --for names "
                   "(progress on stderr).")
@click.option("--for", "until", type=click.Choice(["available", "ready", "progressed"]), default=None,
              help="What --wait waits for (implies --wait): available (default: enough workers and a frontend "
                   "serve), ready (everything at the file's spec Ready), progressed (the rollout finished).")
@click.option("--timeout", type=float, default=600.0, show_default=True, help="With --wait: give up after SEC (exit 1).")
@click.option("-w", "--watch", is_flag=True, help="After the table, print a row again whenever it changes (Ctrl-C stops).")
@click.option("--interval", type=click.FloatRange(min=0.2), default=2.0, show_default=True,
              help="With --watch: seconds between looks.")
def get(names: tuple[str, ...], manifests: str, state: str, driver: str | None, port_range: str,
        instance: str | None, output: str, wait_ready: bool, until: str | None, timeout: float, watch: bool,
        interval: float) -> None:
    """Deployments: READY per role, UP-TO-DATE and AVAILABLE workers, status, reason, restarts, age and
    endpoint (live from the cluster, with the running reconciler's settings)."""
    from pathlib import Path

    from reconciler.cli import deployments, run_settings
    from reconciler.cli.context import resolve

    wait_ready = wait_ready or until is not None
    v = resolve(state, manifests=manifests, driver=driver, port_range=port_range, instance=instance)
    manifests, driver, port_range, instance = v["manifests"], v["driver"], v["port_range"], v["instance"]
    ok = True
    from reconciler.cli import recorded

    # a running `run` records every change it sees: its record is the answer, read without the
    # controller (a few files instead of ~1 s of imports and a pass over the cluster) -- unless a
    # named one has no record: a file refused at load (a name state/ keeps for itself) is listed
    # Invalid by the live look, and `run` writes nothing under such a name
    if not wait_ready and run_settings.run_alive(Path(state)) and recorded.has(Path(state), names):

        def look() -> list[dict]:
            return recorded.rows(Path(state), names, manifests)
    else:  # nothing records: look at the cluster (with `run`'s settings when it ran here)
        def look() -> list[dict]:
            return deployments.get_rows(ctl, names, manifests)

        try:
            ctl = _controller(manifests, state, driver, port_range=port_range, instance=instance, read_only=True)
        except ReconcilerError as e:
            _fail(str(e))
    try:
        rows = look()
        if wait_ready:
            want = [r.get("key", r["name"]) for r in rows]  # FOLDER@NAME: run records status under it
            from reconciler.cli import get_wait

            gens = _generations(ctl, want)
            ok = get_wait.wait(Path(state), want, gens, timeout, until=until or "available")
            rows = look()
    except ReconcilerError as e:
        _fail(str(e))
    _print(rows, output, manifests)
    if output in ("text", "wide"):
        from reconciler.shell.lease import describe

        click.echo(describe(Path(state)))  # which reconciler is active, which waits (run --standby)
    if watch:
        _watch(look, manifests, output, rows, interval)
    if wait_ready and not ok:
        sys.exit(1)


def _generations(ctl, names: list[str]) -> dict[str, str | None]:
    """The generation each file is at now (what `run`'s recorded status must have observed)."""
    snap = ctl.snapshot()
    return {n: (d.generation if (d := snap.desired.recipes.get(n)) else None) for n in names}


def _print(rows: list[dict], output: str, manifests: str, header: bool = True) -> None:
    from reconciler.cli import deployments

    if output == "json":
        click.echo(json.dumps(rows, indent=2))
    elif output == "yaml":
        import yaml

        click.echo(yaml.safe_dump(rows, sort_keys=False), nl=False)
    else:  # file names and messages may hold escape sequences: shown escaped (cli/term.py)
        from reconciler.cli.term import clean

        deployments.print_table(clean(rows), manifests, wide=output == "wide", header=header)


def _watch(look, manifests: str, output: str, rows: list[dict], interval: float) -> None:
    seen = {r.get("key", r["name"]): tuple(json.dumps(r.get(k), sort_keys=True) for k in WATCHED) for r in rows}
    try:
        while True:
            time.sleep(interval)
            try:
                rows = look()
            except ReconcilerError as e:
                click.echo(f"error: {e}", err=True)
                continue
            changed = []
            for r in rows:
                key = tuple(json.dumps(r.get(k), sort_keys=True) for k in WATCHED)
                if seen.get(r.get("key", r["name"])) != key:  # two folders may hold one name
                    seen[r.get("key", r["name"])] = key
                    changed.append(r)
            if changed and output in ("json", "yaml"):
                for r in changed:  # one document per change, as kubectl get -w -o json does
                    click.echo(json.dumps(r) if output == "json" else "---\n" + _yaml(r), nl=output == "json")
            elif changed:
                _print(changed, output, manifests, header=False)
            sys.stdout.flush()
    except KeyboardInterrupt:
        return


def _yaml(r: dict) -> str:
    import yaml

    return yaml.safe_dump(r, sort_keys=False)
