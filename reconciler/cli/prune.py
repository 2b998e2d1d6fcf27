"""`reconciler prune NAME`: confirm the teardown of a deployment the prune guard keeps.

Every manifest vanished at once, so `run` tears nothing down (a mis-mounted directory must not
cost every deployment). When the files are really gone, this confirms one deployment's teardown
without restarting `run --allow-empty`: it writes the confirmation into the state directory
(shell/prune_guard.py) and the running `run` acts on it at its next pass. It touches no workload
itself.
"""

from __future__ import annotations

from pathlib import Path

import click

from reconciler.cli.common import DRIVER_OPT, INSTANCE_OPT, MANIFESTS_OPT, PORTS_OPT, STATE_OPT, _controller, _fail
from reconciler.errors import ReconcilerError
from reconciler.recipe import namespaces


@click.command()
@click.argument("name")
@MANIFESTS_OPT
@STATE_OPT
@DRIVER_OPT
@PORTS_OPT
@INSTANCE_OPT
def prune(name: str, manifests: str, state: str, driver: str | None, port_range: str, instance: str | None) -> None:
    """Tear down NAME, which the prune guard keeps running (its file went with every other): says what
    goes, and the running `run` does it at its next pass. Refused for a deployment the guard does not hold."""
    from reconciler.cli import run_settings
    from reconciler.cli.context import resolve
    from reconciler.core.plan import RecipeState
    from reconciler.shell import prune_guard

    key = namespaces.from_ref(name)
    shown = namespaces.display(key)
    v = resolve(state, manifests=manifests, driver=driver, port_range=port_range, instance=instance)
    try:
        ctl = _controller(v["manifests"], state, v["driver"], port_range=v["port_range"], instance=v["instance"],
                          read_only=True)
        snap = ctl.snapshot()
    except ReconcilerError as e:
        _fail(str(e))
    m, rp = snap.manifests, snap.plan.recipes.get(key)
    if key in snap.desired.recipes or key in m.invalid:
        path = next((p for p, names in m.paths.items() if key in names), v["manifests"])
        _fail(f"{shown} has a manifest ({path}): delete the file to tear it down; `prune` only confirms the "
              "teardown of a deployment the prune guard keeps")
    if rp is None:
        _fail(f"no deployment named {shown} runs here (nothing to prune)")
    if rp.state is not RecipeState.PRUNE_REFUSED:
        _fail(f"{shown} is not held by the prune guard ({rp.state.value}): `run` acts on it without a confirmation")
    alive = run_settings.run_alive(Path(state))
    if alive and ctl.state.status(key).get("phase") != prune_guard.REASON:
        # the running `run` decides: with --allow-empty it holds nothing, and it may not have looked yet
        _fail(f"the running reconciler does not hold {shown} (run --allow-empty tears it down by itself, or its "
              "next pass has not recorded it yet: try again)")
    teardown = [a.describe() for a in rp.deferred]
    again = key in prune_guard.confirmed(ctl.state, {key})
    prune_guard.confirm(ctl.state, key, teardown)
    who = "the running reconciler, at its next pass," if alive else "the next `reconciler run` on this state directory"
    click.echo(f"{shown}: teardown {'already ' if again else ''}confirmed; {who} will:")
    for line in teardown:
        click.echo(f"  {line}")
    if not teardown:
        click.echo("  (nothing of it is left to cancel)")
