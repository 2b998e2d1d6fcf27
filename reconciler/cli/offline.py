"""The verbs that read recipe files and touch no cluster: ``validate``, ``schema``, ``render``
(imported when invoked: see ``_Verbs``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from reconciler.cli.common import STATE_OPT, _cluster, _fail
from reconciler.errors import RecipeError


@click.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("-o", "--output", type=click.Choice(["text", "json"]), default="text")
@click.option("-v", "--verbose", is_flag=True, help="Also list notes, and why each carried key has no effect.")
@click.option("--strict", is_flag=True,
              help="Exit 1 for an ignored file too (a name an earlier file in its folder already has).")
def validate(paths: tuple[str, ...], output: str, verbose: bool, strict: bool) -> None:
    """Validate recipe files (or every *.yaml under directories)."""
    from reconciler.recipe import namespaces
    from reconciler.recipe.load import iter_recipe_files, name_clashes

    cluster = _cluster()
    if cluster and output == "text":
        carried = cluster.carried()
        click.echo(f"cluster config {cluster.path}" + (f" (carried, not acted on: {', '.join(carried)})"
                                                        if carried else ""), err=True)
    files = iter_recipe_files(list(paths))
    roots = {f: next((Path(p) for p in paths if Path(p).is_dir() and f.is_relative_to(Path(p))), None) for f in files}
    results = [r for f in files for r in _validated(f, roots[f], cluster)]
    if not files:  # only directories were named, and none holds a recipe (a fresh clone's manifests/)
        click.echo(f"no recipe files (*.yaml, *.yml) in {', '.join(paths)}: nothing to validate", err=True)
        if output == "json":
            click.echo("[]")
        sys.exit(0)
    # what run would do with a directory: the first file of a name wins, the others are reported
    valid = [r for r in results if r["valid"]]
    keyed = [(r["path"], namespaces.display(namespaces.key(r["namespace"], r["name"]))) for r in valid]
    for i, why in name_clashes(keyed).items():
        # a good file shadowed by an earlier one of the same name in its folder: run keeps the earlier
        # file, this one is Invalid there; said apart from a file that is wrong in itself
        valid[i].update(valid=False, error=why, key="name", line=None, unsupported=None, duplicate=True,
                        problems=[{"key": "name", "line": None, "message": why}])
    if output == "json":
        click.echo(json.dumps(results, indent=2))
    else:
        _print_validated(results, verbose)
    # an ignored file is a warning: the tree is what run accepts (it runs the first of the name and
    # reports the other); --strict makes it an error for a tree that must run every file
    sys.exit(0 if all(r["valid"] or (r.get("duplicate") and not strict) for r in results) else 1)


def _validated(f: Path, root: Path | None, cluster) -> list[dict]:
    """One result per deployment the file declares (a sweep or override file: several), or one
    saying why it is refused, with its key and line."""
    from reconciler.recipe import namespaces
    from reconciler.recipe.load import keyed_name, outside_link
    from reconciler.desired.admission import load_file

    results = []
    try:
        escape = outside_link(root, f) if root else None
        if escape:
            raise RecipeError(str(f), escape.split(": ", 1)[1])
        try:  # a directory's folders are namespaces: the same name in two folders is two deployments
            ns = namespaces.namespace_of_file(root, f) if root else ""
        except namespaces.NamespaceError as e:
            raise RecipeError(str(f), str(e)) from None
        for lr in load_file(f, cluster):
            keyed_name(lr, ns)  # run refuses a key too long to name its state/ directory: so does validate
            layouts = lr.recipe.role_layouts()
            results.append({
                "path": str(f), "valid": True, "error": None, "name": lr.recipe.name, "namespace": ns,
                "layout": lr.layout,
                "engine": "/".join(dict.fromkeys(lr.recipe.engine_for(m).type for m, _ in lr.recipe.roles.items())),
                "frontend": lr.recipe.frontend.type,
                "roles": {m: {"workers": l.workers, "gpus": l.gpus, "nodes": l.nodes} for m, l in layouts.items()},
                "notes": lr.notes, "not_acted_on": lr.not_acted_on, "variant_of": lr.variant_of,
            })
    except RecipeError as e:
        results.append({
            "path": str(f), "valid": False, "error": str(e), "key": e.key or None, "line": e.line,
            "unsupported": e.unsupported,
            "problems": [{"key": p.key or None, "line": p.line, "message": p.message} for p in e.problems()],
        })
    return results


def _print_validated(results: list[dict], verbose: bool) -> None:
    for r in results:
        if r["valid"]:
            roles = ", ".join(f"{m} {v['workers']}x{v['gpus']}gpu" for m, v in r["roles"].items())
            shown = f"{r['namespace']}/{r['name']}" if r["namespace"] else r["name"]
            click.echo(f"{click.style('valid  ', fg='green')} {r['path']}  ({shown}: {r['engine']}, {roles})")
            if verbose:
                for n in r["notes"]:
                    click.echo(f"         note: {n}")
            _print_carried(r["not_acted_on"], verbose, "         ")
        elif r.get("duplicate"):
            click.echo(f"{click.style('ignored', fg='yellow')} {r['error']}")
        else:
            click.echo(f"{click.style('invalid', fg='red')} {r['error']}")
    bad = sum(not r["valid"] for r in results)
    dup = sum(bool(r.get("duplicate")) for r in results)
    click.echo(f"{len(results) - bad} valid, {bad - dup} invalid"
               + (f", {dup} ignored (a name an earlier file in the same folder already has: run keeps that "
                  "file; rename one to run both)" if dup else ""), err=True)


def _print_carried(keys: dict[str, str], verbose: bool, indent: str) -> None:
    if not keys:
        return
    if verbose:
        click.echo(f"{indent}carried, not acted on:")
        for k, why in keys.items():
            click.echo(f"{indent}  {k}: {why}")
    else:
        click.echo(f"{indent}carried, not acted on: {', '.join(keys)}")


@click.command()
def schema() -> None:
    """Print the JSON Schema of a recipe (for yaml-language-server and editors)."""
    from reconciler.recipe.schema import recipe_json_schema

    click.echo(json.dumps(recipe_json_schema(), indent=2))


@click.command()
@click.argument("recipe", type=click.Path())
@click.option("--nodes", help="Comma-separated hostnames to place on (default: node1..nodeN sized to the recipe).")
@click.option("-o", "--output", type=click.Choice(["text", "json"]), default="text")
@click.option("--process-exporter", is_flag=True,
              help="Print the process exporter's group file for the recipe (its engines' process groups) instead.")
@STATE_OPT
def render(recipe: str, nodes: str | None, output: str, state: str, process_exporter: bool) -> None:
    """Dry run: every process a recipe would launch (role, nodes, GPUs, ports, env, argv)."""
    from reconciler.desired.exporters import config_text
    from reconciler.desired.admission import load_file
    from reconciler.desired.render import as_rows, render_units

    try:
        loaded = load_file(recipe, _cluster())
    except RecipeError as e:
        _fail(str(e))
    if process_exporter and output == "text":
        click.echo("".join(config_text(lr.recipe) for lr in loaded), nl=False)
        return
    names = [n.strip() for n in nodes.split(",") if n.strip()] if nodes else None
    docs = []
    for lr in loaded:
        try:
            rows = as_rows(render_units(lr.recipe, names, Path(state)))
        except ValueError as e:
            _fail(f"{recipe}: {lr.recipe.name}: {e}")
        docs.append({"name": lr.recipe.name, "processes": rows, "not_acted_on": lr.not_acted_on,
                     "process_exporter": config_text(lr.recipe)})
    if output == "json":
        # a plain file renders one deployment; a sweep / override file one per variant
        click.echo(json.dumps(docs[0] if len(docs) == 1 and not loaded[0].variant_of else {"deployments": docs},
                              indent=2))
        return
    for doc in docs:
        if len(docs) > 1 or loaded[0].variant_of:
            click.echo(click.style(f"# deployment {doc['name']}", bold=True))
        _print_rows(doc["processes"])
        if not doc["processes"]:
            click.echo(f"# {doc['name']}: no workers (scaled to 0): nothing runs")
        _print_carried(doc["not_acted_on"], True, "")


def _print_rows(rows: list[dict]) -> None:
    import shlex

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
        if r["srun_options"]:
            click.echo("  srun: " + " ".join(f"--{k}={v}" if v != "" else f"--{k}" for k, v in r["srun_options"].items()))
        for k, v in r["env"].items():
            click.echo(f"  env {k}={shlex.quote(v)}")
        click.echo("  argv: " + shlex.join(r["argv"]))
        if r["health"]:
            click.echo(f"  probe: {r['health']}" + (f"  metrics: {r['metrics']}" if r["metrics"] else ""))
        for f in r["files"]:
            click.echo(f"  file: {f}")
