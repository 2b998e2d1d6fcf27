"""`reconciler benchmarks NAME`: a deployment's benchmark runs, oldest first (reconcile.benchmark)."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import click

from reconciler.cli.common import STATE_OPT
from reconciler.recipe import namespaces


@click.command()
@click.argument("name")
@STATE_OPT
@click.option("-o", "--output", type=click.Choice(["text", "json"]), default="text")
def benchmarks(name: str, state: str, output: str) -> None:
    """NAME's benchmark runs: status, req/s, output tok/s, TTFT and ITL p50/p99, errors, the spec measured."""
    from reconciler.shell.gates.bench_results import bench_dir, history

    key = namespaces.from_ref(name)
    runs = history(Path(state), key)
    if output == "json":
        click.echo(json.dumps(runs, indent=2))
        return
    if not runs:
        click.echo(f"no benchmark runs for {name} (in {bench_dir(Path(state), key)})", err=True)
        return
    rows = [("RUN", "STATUS", "CONC", "REQ/S", "OUT TOK/S", "TTFT P50/P99 MS", "ITL P50/P99 MS", "ERRORS",
             "OUT TOKENS", "SECONDS", "SPEC", "REASON")]
    f = lambda v, spec: "-" if v is None else format(v, spec)  # noqa: E731
    for r in runs:
        rows.append((r.get("run", "?"), r["status"], "x".join(str(lv.get("concurrency")) for lv in r.get("levels", [])),
                     f(r.get("req_s"), ".2f"), f(r.get("output_tok_s"), ".1f"),
                     f"{f(r.get('ttft_p50_ms'), '.1f')}/{f(r.get('ttft_p99_ms'), '.1f')}",
                     f"{f(r.get('itl_p50_ms'), '.2f')}/{f(r.get('itl_p99_ms'), '.2f')}", str(r.get("errors", 0)),
                     str(r.get("output_tokens", 0)), f(r.get("duration_s"), ".1f"), str(r.get("subject", ""))[:12],
                     r.get("reason") or "-"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        click.echo("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
    ended = runs[-1].get("ended")
    if isinstance(ended, (int, float)):
        click.echo(f"last run ended {datetime.fromtimestamp(ended, timezone.utc).isoformat(timespec='seconds')}",
                   err=True)
