"""Read commands default to what `run` recorded (state/run.json), and say so when a flag disagrees.

Also the port range's sanity warnings, shared by `run` and every read command.
"""

from __future__ import annotations

from pathlib import Path

import click
from click.core import ParameterSource

from reconciler.cli import run_settings

EPHEMERAL = Path("/proc/sys/net/ipv4/ip_local_port_range")
DYNAMO_MAX_PORT = 32767  # Dynamo 1.6 reads DYN_SYSTEM_PORT as a signed 16-bit number

# flag's parameter name -> run.json's key
_FLAGS = {"manifests": "manifests", "driver": "driver", "port_range": "portRange", "instance": "instance"}
_SPELLING = {"manifests": "--manifests", "driver": "--driver", "port_range": "--port-range",
             "instance": "--instance (or RECONCILER_INSTANCE)"}


def _explicit(ctx: click.Context, param: str) -> bool:
    src = ctx.get_parameter_source(param)
    return src is not None and src not in (ParameterSource.DEFAULT, ParameterSource.DEFAULT_MAP)


def resolve(state: str, **given: str | None) -> dict[str, str | None]:
    """``given``: the command's own values of manifests / driver / port_range / instance (those it has).
    Unset ones become the recorded ones; explicit ones that disagree get a warning on stderr.
    The cluster config follows the same rule (the root group's --cluster-config)."""
    ctx = click.get_current_context()
    rec = run_settings.read(Path(state))
    out = dict(given)
    if rec is None:
        return out
    who = "the running reconciler" if run_settings.run_alive(Path(state)) else "the last `run` on this state directory"
    for param, value in given.items():
        key = _FLAGS[param]
        theirs = rec.get(key)
        if theirs is None and key != "instance":
            continue
        if not _explicit(ctx, param):
            out[param] = theirs
        elif not run_settings.same(key, value, theirs) and not (key == "instance" and theirs is None):
            _warn(f"{_SPELLING[param]} {value} differs from {who}'s {theirs} ({Path(state) / run_settings.FILE}); "
                  "showing yours, which is not what `run` does")
    root = ctx.find_root()
    obj = root.obj if isinstance(root.obj, dict) else {}
    if root.obj is None:
        root.obj = obj
    recorded_cfg = rec.get("clusterConfig")
    mine = obj.get("cluster_config")
    if not mine:
        obj["cluster_config"] = recorded_cfg
        obj["cluster_config_none"] = recorded_cfg is None  # run found none: do not pick up a stray one here
    elif not run_settings.same("clusterConfig", mine, recorded_cfg):
        _warn(f"--cluster-config {mine} differs from {who}'s {recorded_cfg or 'none'}; showing yours")
    return out


def _warn(msg: str) -> None:
    click.echo(click.style("warning: ", fg="yellow") + msg, err=True)


def ephemeral_range(path: Path = EPHEMERAL) -> tuple[int, int] | None:
    """Linux's ephemeral (client socket) port range, inclusive, or None where it cannot be read."""
    try:
        lo, hi = (int(x) for x in path.read_text().split())
        return lo, hi
    except (OSError, ValueError):
        return None


def port_range_warnings(lo: int, hi: int, ephemeral: tuple[int, int] | None) -> list[str]:
    """What is wrong with handing out ports from [lo, hi), in words (nothing: [])."""
    out = []
    if hi - 1 > DYNAMO_MAX_PORT:
        out.append(f"--port-range {lo}-{hi} goes above {DYNAMO_MAX_PORT}; Dynamo workers refuse a system port "
                   "there (DYN_SYSTEM_PORT is read as a signed 16-bit number)")
    if ephemeral and lo <= ephemeral[1] and hi - 1 >= ephemeral[0]:
        out.append(f"--port-range {lo}-{hi} overlaps Linux's ephemeral port range {ephemeral[0]}-{ephemeral[1]} "
                   "(/proc/sys/net/ipv4/ip_local_port_range): srun's and every client's own sockets take ports "
                   "there, and a worker given one of them fails to bind")
    return out
