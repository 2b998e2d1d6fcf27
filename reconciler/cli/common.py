"""What every command shares: the common options, the cluster config, the controller, errors."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from reconciler.errors import RecipeError

MANIFESTS_OPT = click.option(
    "--manifests", "manifests", default="manifests", show_default=True, type=click.Path(file_okay=False),
    envvar="RECONCILER_MANIFESTS",
    help="Directory of recipe files (read commands: the running reconciler's, from STATE/run.json).",
)
STATE_OPT = click.option(
    "--state", "state", default="state", show_default=True, type=click.Path(file_okay=False),
    envvar="RECONCILER_STATE", help="Directory for status, logs and the port registry ($RECONCILER_STATE).",
)
PORTS_OPT = click.option(
    "--port-range", "port_range", default="20000-32000", show_default=True, envvar="RECONCILER_PORT_RANGE",
    help="Ports handed to workers and routers (LO-HI: LO included, HI not), unique per node across recipes.",
)
INSTANCE_OPT = click.option(
    "--instance", default=None, envvar="RECONCILER_INSTANCE",
    help="This reconciler's name on the cluster: it only sees and touches Slurm objects labelled with it "
         "(default: derived from --state). Set it to keep ownership when the state directory moves.",
)
DRIVER_OPT = click.option(
    "--driver", type=click.Choice(["slurm", "local"]), default=None,
    help="Where workloads run (default: slurm when sbatch is on PATH, else local).",
)


def _cluster():
    """The cluster config in effect (or None); a bad one stops the command, nothing runs on a guess."""
    from reconciler.recipe import cluster

    ctx = click.get_current_context()
    obj = ctx.find_root().obj or {}
    if obj.get("cluster_config_none"):
        return None  # the running reconciler found none: a srtslurm.yaml near this shell is not its
    try:
        return cluster.load(obj.get("cluster_config"))
    except RecipeError as e:
        _fail(f"cluster config: {e}")


def _controller(manifests: str, state: str, driver: str | None, allow_empty: bool = False,
                port_range: str = "20000-32000", instance: str | None = None, read_only: bool = False):
    from reconciler.shell.loop import Controller
    from reconciler.drivers import make_driver

    try:
        lo, hi = (int(x) for x in port_range.split("-", 1))
        if not 0 < lo < hi <= 65536:
            raise ValueError
    except ValueError:
        _fail(f"--port-range: expected LO-HI with 0 < LO < HI <= 65536, found {port_range!r}")
    from reconciler.cli.context import ephemeral_range, port_range_warnings

    for msg in port_range_warnings(lo, hi, ephemeral_range()):
        click.echo(click.style("warning: ", fg="yellow") + msg, err=True)
    try:
        drv = make_driver(driver, Path(state), instance)
    except ValueError as e:
        _fail(f"--instance: {e}")
    return Controller(Path(manifests), Path(state), drv, allow_empty=allow_empty, port_range=(lo, hi),
                      read_only=read_only, cluster=_cluster())


def _fail(msg: str, code: int = 1) -> None:
    from reconciler.cli.term import shown

    click.echo(f"error: {shown(msg)}", err=True)  # a file name in it may hold escape sequences
    sys.exit(code)
