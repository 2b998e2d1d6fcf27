"""What srtctl runs in a container step before its command: the cluster's ``default_bash_preamble``
and the recipe's ``setup_script`` (cli/mixins/worker_stage.py ``_build_worker_preamble``, core/slurm.py).

srtctl writes them into one ``bash -c`` text joined with ``&&``: the cluster snippet first (every
container step: workers, frontend, services), then, on workers, the setup script, then the Dynamo
install (reconciler.backends.dynamo_install), then the command. Here each is a fixed script that takes its
input as positional arguments and ``exec``s the rest of its argv unchanged:

* ``setup_script``: its name (validated: a relative path without ``..``) is an argument; the script
  runs ``bash /configs/<name>``, or ``/configs/patches/<name>``, and a failure stops the worker; a
  missing script is a warning and the worker starts, as in srtctl. ``/configs`` is the cluster
  config's ``<srtctl_root>/configs`` (srtctl mounts its source tree's configs there); without
  ``srtctl_root`` (or on host runtimes, where it would change the hosts' Python) nothing runs and
  ``validate`` reports the key as carried.
* ``default_bash_preamble``: the site's shell snippet is written by the cluster's administrator, not
  by a recipe; it is passed as an argument and ``eval``'d by the step's own bash, so its exports and
  ulimits reach the command as in srtctl. Container steps only, as in srtctl.
"""

from __future__ import annotations

from dataclasses import replace

from typing import TYPE_CHECKING

from reconciler.recipe.model import Recipe

if TYPE_CHECKING:
    from reconciler.world import Unit

CONFIGS_MOUNT = "/configs"
SETUP_TAG = "setup-script"
CLUSTER_TAG = "cluster-preamble"
_SETUP = r"""name=$1; shift
for p in "/configs/$name" "/configs/patches/$name"; do
  if [ -f "$p" ]; then
    echo "Running setup script: $p"
    bash "$p" || { echo "setup script $p failed" >&2; exit 1; }
    exec "$@"
  fi
done
echo "WARNING: /configs/$name or /configs/patches/$name not found" >&2
exec "$@"
"""
_CLUSTER = 'eval "$1" || { echo "default_bash_preamble failed" >&2; exit 1; }; shift; exec "$@"'


def setup_script(recipe: Recipe, in_container: bool) -> list[str]:
    """The setup-script wrapper of a worker (empty when srtctl's configs directory is not mounted)."""
    if not recipe.setup_script or not recipe.reconcile.configs_dir or not in_container:
        return []
    return ["bash", "-c", _SETUP, SETUP_TAG, recipe.setup_script]


def configs_mount(recipe: Recipe) -> dict[str, str]:
    return {recipe.reconcile.configs_dir: CONFIGS_MOUNT} if recipe.reconcile.configs_dir else {}


def with_cluster_preamble(unit: Unit | None, recipe: Recipe) -> Unit | None:
    """``unit`` with the cluster's snippet before each launch of a container step (its spec hash
    is the pipeline's last pass, ``desired/passes.finish``)."""
    snippet = recipe.reconcile.bash_preamble
    if unit is None or not snippet or not unit.container:
        return unit
    launches = tuple(replace(l, argv=("bash", "-c", _CLUSTER, CLUSTER_TAG, snippet, *l.argv)) for l in unit.launches)
    return replace(unit, launches=launches)


def strip(argv: list[str]) -> tuple[list[str], dict[str, str]]:
    """(argv behind the cluster snippet and the setup script, {tag: its argument})."""
    found = {}
    for tag in (CLUSTER_TAG, SETUP_TAG):
        if len(argv) > 4 and argv[:2] == ["bash", "-c"] and argv[3] == tag:
            found[tag] = argv[4]
            argv = argv[5:]
    return argv, found


def not_acted_on(recipe: Recipe, in_container: bool) -> dict[str, str]:
    if not recipe.setup_script:
        return {}
    if not in_container:
        return {"setup_script": "workers run on the hosts: srtctl runs it inside the container, here it would "
                                "change the hosts' Python; not run"}
    if not recipe.reconcile.configs_dir:
        return {"setup_script": "srtctl runs it from <srtctl_root>/configs (mounted at /configs); the cluster "
                                "config sets no srtctl_root, so there is no configs directory: not run"}
    return {}
