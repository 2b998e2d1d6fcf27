"""Admission: the rules a recipe must meet beyond its schema before anything is built from it.

The recipe layer reads, bounds and validates the file against the schema and locates every
problem (``recipe/load.py``); what it cannot judge alone — an engine's own topology rules,
the services the recipe implies, what its frontend accepts, the Dynamo version to install,
and which keys are carried without effect — is judged here, by the layers that act on it.
``load_*`` are the loader's entry points with these rules in force: every caller uses them.
"""

from __future__ import annotations

from pathlib import Path

from reconciler.backends.dynamo_install import check_version
from reconciler.backends.registry import endpoints_of
from reconciler.desired.analysis import check as check_analysed
from reconciler.desired.bench_map import bench_plan
from reconciler.desired.frontends import check as check_frontend
from reconciler.desired.frontends import owned_arg
from reconciler.desired.passive import not_acted_on
from reconciler.desired.services.spec import discovery_of, resolve
from reconciler.desired.runtime import node_count
from reconciler.errors import KeyedError
from reconciler.recipe import load
from reconciler.recipe.autoscale import check as check_autoscale
from reconciler.recipe.rollout import check as check_rollout
from reconciler.recipe.cluster import Cluster
from reconciler.recipe.load import LoadedRecipe
from reconciler.recipe.model import Recipe


def admit(recipe: Recipe, data: dict, preflight: bool) -> dict[str, str]:
    """The keys carried without effect (key path -> why); a broken rule raises KeyedError."""
    if preflight:
        try:
            check_version(recipe)
        except ValueError as e:
            raise KeyedError("dynamo.version", str(e)) from None
    endpoints_of(recipe)  # each engine's topology rules (TopologyError at the role's key)
    resolve(recipe)  # the services it runs (ServiceError at the service's key)
    check_autoscale(recipe)  # the autoscaled roles exist and start within [min, max]
    check_rollout(recipe)  # rollout analysis measures a worker alone: agg roles only
    check_analysed(recipe)  # ... and one that serves HTTP itself (not a Dynamo worker)
    wrong = check_frontend(recipe)
    if wrong is not None:
        raise KeyedError(*wrong)
    key = owned_arg(recipe)
    if key is not None:
        raise KeyedError(f"frontend.args.{key}", f"the reconciler sets --{key.lstrip('-')} itself (its probe and "
                                                 "`get` use it): set frontend.port instead")
    disc = discovery_of(recipe)
    if disc.backend == "file" and not disc.file_dir and node_count(recipe) > 1:
        raise KeyedError("reconcile.discovery", "file discovery across several nodes needs a directory every node "
                                                "sees: set discovery.shared_dir in the cluster config (or "
                                                "reconcile.discovery_dir)")
    carried = not_acted_on(recipe, data)
    if recipe.reconcile.benchmark is not None:  # asked to run: its type must map to aiperf, or it is refused here
        bench_plan(recipe.benchmark)
        carried.pop("benchmark", None)
    return carried


def load_file(path: str | Path, cluster: Cluster | None = None) -> list[LoadedRecipe]:
    """Every deployment a file declares: one, or one per sweep combination / override variant."""
    return load.load_file(path, cluster, admit=admit)


def load_recipe(path: str | Path, cluster: Cluster | None = None) -> LoadedRecipe:
    """A file that declares exactly one deployment."""
    return load.load_recipe(path, cluster, admit=admit)


def load_text(text: str, path: str, cluster: Cluster | None = None, preflight: bool = True) -> LoadedRecipe:
    """``preflight=False``: skip the checks of this host's view (the model directory exists, the
    Dynamo version is one): a spec that already ran is not refused for them."""
    return load.load_text(text, path, cluster, preflight, admit=admit)


def load_all(text: str, path: str, cluster: Cluster | None = None, preflight: bool = True) -> list[LoadedRecipe]:
    return load.load_all(text, path, cluster, preflight, admit=admit)
