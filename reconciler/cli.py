"""The ``reconciler`` command line."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from reconciler.errors import RecipeError, ReconcilerError

MANIFESTS_OPT = click.option(
    "--manifests", "manifests", default="manifests", show_default=True, type=click.Path(file_okay=False),
    help="Directory of recipe files.",
)
STATE_OPT = click.option(
    "--state", "state", default="state", show_default=True, type=click.Path(file_okay=False),
    help="Directory for status, logs and the port registry.",
)
DRIVER_OPT = click.option(
    "--driver", type=click.Choice(["slurm", "local"]), default=None,
    help="Where workloads run (default: slurm when sbatch is on PATH, else local).",
)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="reconciler")
def cli() -> None:
    """Keep srt-slurm (srtctl) LLM serving recipes converged on Slurm."""


@cli.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("-o", "--output", type=click.Choice(["text", "json"]), default="text")
@click.option("-v", "--verbose", is_flag=True, help="Also list notes and the keys the reconciler does not act on.")
def validate(paths: tuple[str, ...], output: str, verbose: bool) -> None:
    """Validate recipe files (or every *.yaml under directories)."""
    from reconciler.recipe.load import iter_recipe_files, load_recipe

    files = iter_recipe_files(list(paths))
    results = []
    for f in files:
        try:
            lr = load_recipe(f)
            layouts = lr.recipe.role_layouts()
            results.append({
                "path": str(f), "valid": True, "error": None, "name": lr.recipe.name, "layout": lr.layout,
                "engine": lr.recipe.backend.type, "frontend": lr.recipe.frontend.type,
                "roles": {m: {"workers": l.workers, "gpus": l.gpus, "nodes": l.nodes} for m, l in layouts.items()},
                "notes": lr.notes, "not_acted_on": lr.passive_keys,
            })
        except RecipeError as e:
            results.append({
                "path": str(f), "valid": False, "error": str(e), "key": e.key or None, "line": e.line,
                "unsupported": e.unsupported,
            })
    if not files:
        _fail(f"no recipe files (*.yaml, *.yml) found in {', '.join(paths)}")
    if output == "json":
        click.echo(json.dumps(results, indent=2))
    else:
        for r in results:
            if r["valid"]:
                roles = ", ".join(f"{m} {v['workers']}x{v['gpus']}gpu" for m, v in r["roles"].items())
                click.echo(f"{click.style('valid  ', fg='green')} {r['path']}  ({r['name']}: {r['engine']}, {roles})")
                if verbose:
                    for n in r["notes"]:
                        click.echo(f"         note: {n}")
                    if r["not_acted_on"]:
                        click.echo(f"         not acted on: {', '.join(r['not_acted_on'])}")
            else:
                click.echo(f"{click.style('invalid', fg='red')} {r['error']}")
        bad = sum(not r["valid"] for r in results)
        click.echo(f"{len(results) - bad} valid, {bad} invalid", err=True)
    sys.exit(0 if all(r["valid"] for r in results) else 1)


@cli.command()
def schema() -> None:
    """Print the JSON Schema of a recipe (for yaml-language-server and editors)."""
    from reconciler.recipe.schema import recipe_json_schema

    click.echo(json.dumps(recipe_json_schema(), indent=2))


@cli.command()
@click.argument("recipe", type=click.Path())
@click.option("--nodes", help="Comma-separated hostnames to place on (default: node1..nodeN sized to the recipe).")
@click.option("-o", "--output", type=click.Choice(["text", "json"]), default="text")
@STATE_OPT
def render(recipe: str, nodes: str | None, output: str, state: str) -> None:
    """Dry run: every process a recipe would launch (role, nodes, GPUs, ports, env, argv)."""
    import shlex

    from reconciler.recipe.load import load_recipe
    from reconciler.render import as_rows, render_units

    try:
        lr = load_recipe(recipe)
    except RecipeError as e:
        _fail(str(e))
    names = [n.strip() for n in nodes.split(",") if n.strip()] if nodes else None
    try:
        rows = as_rows(render_units(lr.recipe, names, Path(state)))
    except ValueError as e:
        _fail(f"{recipe}: {e}")
    if output == "json":
        click.echo(json.dumps(rows, indent=2))
        return
    for r in rows:
        where = ",".join(r["nodes"])
        gpus = ",".join(map(str, r["gpus"])) or "-"
        ports = " ".join(f"{k}={v}" for k, v in r["ports"].items())
        head = f"{r['role']}_{r['index']}" + (f" rank {r['rank']}" if r["rank"] else "")
        click.echo(click.style(head, bold=True) + f"  nodes={where} gpus={gpus} {ports}  spec={r['spec_hash']}")
        if r["ntasks"] > 1 or r["mpi"]:
            click.echo(f"  launch: ntasks={r['ntasks']} mpi={r['mpi']}")
        if r["container"]:
            click.echo(f"  container: {r['container']}")
        for k, v in r["env"].items():
            click.echo(f"  env {k}={shlex.quote(v)}")
        click.echo("  argv: " + shlex.join(r["argv"]))
        for f in r["files"]:
            click.echo(f"  file: {f}")


def _fail(msg: str, code: int = 1) -> None:
    click.echo(f"error: {msg}", err=True)
    sys.exit(code)


def main() -> None:
    try:
        cli(standalone_mode=True)
    except ReconcilerError as e:
        _fail(str(e))
    except KeyboardInterrupt:
        _fail("interrupted", 130)


if __name__ == "__main__":
    main()
