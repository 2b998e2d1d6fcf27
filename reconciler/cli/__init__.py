"""The ``reconciler`` command line."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from reconciler.cli.common import DRIVER_OPT, INSTANCE_OPT, MANIFESTS_OPT, PORTS_OPT, STATE_OPT, _controller, _fail
from reconciler.errors import ReconcilerError

class _Verbs(click.Group):
    """The day-to-day verbs live in modules of their own, imported when invoked (or listed by
    --help): `get`, `events`, `logs` must not pay for the controller's imports, which every other
    verb would otherwise bring in (tests/test_cli_read_fast.py keeps it so)."""

    LAZY = {"get": "reconciler.cli.get:get", "benchmarks": "reconciler.cli.bench:benchmarks",
            "prune": "reconciler.cli.prune:prune",
            "keys": "reconciler.cli.keys:keys",
            **{v: f"reconciler.cli.offline:{v}" for v in ("validate", "schema", "render")},
            **{v: f"reconciler.cli.ops:{v}" for v in ("describe", "events", "logs", "suspend", "resume")}}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(self.LAZY))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        where = self.LAZY.get(cmd_name)
        if where is None:
            return super().get_command(ctx, cmd_name)
        import importlib

        module, _, attr = where.partition(":")
        return getattr(importlib.import_module(module), attr)


@click.group(cls=_Verbs, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="reconciler")
@click.option("--cluster-config", "cluster_config", type=click.Path(dir_okay=False), default=None,
              help="srtctl's srtslurm.yaml (default: $SRTSLURM_CONFIG, else srtslurm.yaml in this directory, "
                   "its parent or grandparent).")
@click.pass_context
def cli(ctx: click.Context, cluster_config: str | None) -> None:
    """Keep srt-slurm (srtctl) LLM serving recipes converged on Slurm."""
    ctx.obj = {"cluster_config": cluster_config}


def _recipe_as_written(_logger, _method, event: dict) -> dict:
    """A log line names a recipe as users write it (FOLDER/NAME), not by its internal key."""
    from reconciler.recipe import namespaces

    if isinstance(event.get("recipe"), str):
        event["recipe"] = namespaces.display(event["recipe"])
    return event


def _setup_logging(verbose: bool = False, fmt: str = "auto") -> None:
    import logging

    import structlog

    tty = sys.stderr.isatty()
    console = fmt == "console" or (fmt == "auto" and tty)
    # "tick failed" and friends carry their traceback: ConsoleRenderer prints it itself
    render = [structlog.dev.ConsoleRenderer(colors=tty)] if console else [
        structlog.processors.format_exc_info, structlog.processors.JSONRenderer()]
    structlog.configure(
        processors=[
            _recipe_as_written,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="%H:%M:%S" if console else "iso"),
            *render,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG if verbose else logging.INFO),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
    )


@cli.command()
@MANIFESTS_OPT
@STATE_OPT
@DRIVER_OPT
@PORTS_OPT
@INSTANCE_OPT
@click.option("--once", is_flag=True, help="Run one reconcile pass and exit.")
@click.option("--allow-empty", is_flag=True, help="Allow tearing everything down when no manifest is left.")
@click.option("--resync", type=float, default=5.0, show_default=True, help="Seconds between full passes.")
@click.option("--metrics-addr", default=None, metavar="HOST:PORT",
              help="Serve Prometheus metrics at http://HOST:PORT/metrics.")
@click.option("--ui-addr", default=None, metavar="HOST:PORT",
              help="Serve the status page at http://HOST:PORT/ (read-only; :PORT binds 127.0.0.1).")
@click.option("--http-token-file", default=None, metavar="FILE",
              help="The status page and the metrics answer only requests that carry the token on FILE's first "
                   "line (Authorization: Bearer, or ?token= once in a browser). A file, not an argument: argv "
                   "is readable by every user of the host.")
@click.option("--log-format", type=click.Choice(["auto", "json", "console"]), default="auto", show_default=True,
              help="auto: human-readable on a terminal, JSON lines otherwise.")
@click.option("--notify", "notify_url", default=None, metavar="URL",
              help="POST each condition change as JSON to URL (retried a few times; never blocks the loop).")
@click.option("--node-cooldown", type=click.FloatRange(min=0), default=120.0, show_default=True, metavar="SEC",
              help="After a node failure, new allocations exclude the node until it has been back this long.")
@click.option("--standby", is_flag=True,
              help="If another reconciler holds the state directory, wait and take over when it ends "
                   "or makes no pass for the lease timeout.")
@click.option("--lease-timeout", type=click.FloatRange(5, 3600), default=30.0, show_default=True, metavar="SEC",
              help="A standby takes over from an active reconciler that made no pass for this long "
                   "(the longer of the standby's and the active one's); get warns past it.")
def run(manifests: str, state: str, driver: str | None, port_range: str, instance: str | None, once: bool,
        allow_empty: bool, resync: float, metrics_addr: str | None, ui_addr: str | None, log_format: str,
        notify_url: str | None, node_cooldown: float, standby: bool, lease_timeout: float,
        http_token_file: str | None = None) -> None:
    """Watch the manifests and keep the cluster converged (SIGTERM/SIGINT stop it; workloads keep running)."""
    import signal

    _setup_logging(fmt=log_format)
    from reconciler import fsutil

    # state/ holds recipes' secrets, logs and request bodies: the reconciler's user's alone (files
    # 0600, directories 0700); the engines it launches keep the umask it was started with
    fsutil.private_umask()
    fsutil.private_root(Path(state))
    ctl = _controller(manifests, state, driver, allow_empty, port_range, instance)
    ctl.nodes.cooldown = node_cooldown
    ctl.lease.term = lease_timeout
    token = None
    if http_token_file:
        from reconciler import hostguard

        try:
            token = hostguard.read_token(http_token_file)
        except ValueError as e:
            _fail(f"--http-token-file: {e}")
    if metrics_addr:
        host, _, port = metrics_addr.rpartition(":")
        if not port.isdigit() or not 0 < int(port) < 65536:
            _fail(f"--metrics-addr: expected HOST:PORT (or :PORT), found {metrics_addr!r}")
        try:
            ctl.enable_metrics(metrics_addr, token)
        except OSError as e:
            _fail(f"--metrics-addr {metrics_addr}: cannot listen: {e.strerror or e}")
    if notify_url:
        if not notify_url.startswith(("http://", "https://")):
            _fail(f"--notify: expected an http:// or https:// URL, found {notify_url!r}")
        from reconciler.shell.notify import Notifier

        ctl.state.listeners.append(Notifier(notify_url))
    Path(manifests).mkdir(parents=True, exist_ok=True)

    def stop(signum, frame):  # noqa: ARG001
        ctl.stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    import structlog

    structlog.get_logger("reconciler").info(
        "reconciler started", manifests=str(Path(manifests).absolute()), state=str(Path(state).absolute()),
        driver=ctl.driver.name, instance=ctl.driver.owner, resync=resync, metrics=metrics_addr, notify=notify_url,
        cluster_config=ctl.cluster_watch.describe())
    from reconciler.cli import run_settings

    settings = {
        "instance": ctl.driver.owner, "portRange": f"{ctl.ports.base}-{ctl.ports.limit}",
        "driver": ctl.driver.name, "manifests": str(Path(manifests).absolute()), "state": str(Path(state).absolute()),
        "clusterConfig": str(Path(ctl.cluster.path).absolute()) if ctl.cluster else None,
        "metricsAddr": metrics_addr, "uiAddr": ui_addr, "leaseTimeout": lease_timeout}
    ctl.cluster_watch.follow(settings, lambda: run_settings.write(Path(state), settings))  # srtslurm.yaml rewritten

    def started() -> None:  # holding the lock: read commands default to these (cli_context.resolve)
        run_settings.write(Path(state), settings)
        if ui_addr:
            _serve_ui(ctl, ui_addr, settings, token)

    ctl.run(resync=resync, once=once, on_locked=started, standby=standby)


def _serve_ui(ctl, addr: str, settings: dict, token: str | None = None) -> None:
    from reconciler.ui import StatusUI

    host, _, port = addr.rpartition(":")
    if not port.isdigit() or not 0 < int(port) < 65536:
        _fail(f"--ui-addr: expected HOST:PORT (or :PORT), found {addr!r}")
    ui = StatusUI(settings)
    try:
        ui.serve(f"{host or '127.0.0.1'}:{port}", token)
    except OSError as e:
        _fail(f"--ui-addr {addr}: cannot listen: {e.strerror or e}")
    ctl.ui = ui


@cli.command("plan")
@MANIFESTS_OPT
@STATE_OPT
@DRIVER_OPT
@PORTS_OPT
@INSTANCE_OPT
@click.option("--allow-empty", is_flag=True)
@click.option("-o", "--output", type=click.Choice(["text", "json"]), default="text")
def plan_cmd(manifests: str, state: str, driver: str | None, port_range: str, instance: str | None,
             allow_empty: bool, output: str) -> None:
    """Show the actions `run` would take now. Exit 0: nothing to do; 2: changes pending; 1: error."""
    from reconciler.cli.context import resolve

    v = resolve(state, manifests=manifests, driver=driver, port_range=port_range, instance=instance)
    manifests, driver, port_range, instance = v["manifests"], v["driver"], v["port_range"], v["instance"]
    try:
        snap = _controller(manifests, state, driver, allow_empty, port_range, instance, read_only=True).snapshot()
    except ReconcilerError as e:
        _fail(str(e))
    acts = snap.plan.actions
    if output == "json":
        from reconciler.core.plan.render import plan_json

        from reconciler.recipe import namespaces

        invalid = {namespaces.display(k): why for k, why in snap.manifests.invalid.items()}
        click.echo(json.dumps({**plan_json(snap.plan), "invalid": invalid}, indent=2))
    else:
        for msg in sorted(snap.manifests.invalid.values()):
            click.echo(click.style("invalid ", fg="red") + msg)
        for a in acts:
            click.echo(a.describe())
        for n in snap.plan.waiting_lines():
            click.echo(click.style("waiting: ", fg="yellow") + n)
        for name, rp in sorted(snap.plan.recipes.items()):
            if rp.state.name == "PRUNE_REFUSED":
                for a in rp.deferred:
                    click.echo(click.style("refused: ", fg="red") + a.describe())
        if not acts and not snap.plan.refused_prune:
            from reconciler.cli.waits import allocation_waits, summary

            queued = summary(allocation_waits(snap.plan, snap.observed))
            # exit 0 either way: nothing for `run` to do; the text says what Slurm still has to do
            click.echo(f"nothing to do; {queued}" if queued else "nothing to do: the cluster matches the manifests",
                       err=True)
    sys.exit(2 if acts or snap.plan.refused_prune else 0)


def main() -> None:
    import os

    try:
        cli(standalone_mode=True)
    except ReconcilerError as e:
        _fail(str(e))
    except KeyboardInterrupt:
        _fail("interrupted", 130)
    except Exception as e:  # noqa: BLE001 - users get one line; RECONCILER_DEBUG=1 gets the traceback
        if os.environ.get("RECONCILER_DEBUG"):
            raise
        _fail(f"internal error: {type(e).__name__}: {e} (set RECONCILER_DEBUG=1 for the traceback, and please report it)")


