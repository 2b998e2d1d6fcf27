"""Where a recipe's service instances go, as node ordinals: srtctl's dedicated node, one
instance per node of a worker-node placement. Pure."""

from __future__ import annotations

from reconciler.backends.registry import endpoints_of
from reconciler.desired.runtime import node_count
from reconciler.desired.services.types import WORKER_NODES, ServiceSpec
from reconciler.recipe.model import Recipe


def dedicated_ordinal(recipe: Recipe, specs: list[ServiceSpec]) -> int | None:
    """srtctl's ``dedicated``: one more node after the workers', for the services only (None: not asked)."""
    if any(s.placement == "dedicated" and not s.external for s in specs):
        return node_count(recipe)
    return None


def total_nodes(recipe: Recipe, specs: list[ServiceSpec]) -> int:
    return node_count(recipe) + (dedicated_ordinal(recipe, specs) is not None)


def instance_ordinals(recipe: Recipe, spec: ServiceSpec, specs: list[ServiceSpec] | None = None) -> list[int]:
    """The node ordinals of a service's instances, instance index = position (srtctl: one per node)."""
    if spec.placement == "dedicated":
        return [node_count(recipe)]
    if spec.placement not in WORKER_NODES:
        return [0]  # head, and infra (the head here)
    if spec.placement == "all":  # every allocated node, the dedicated one included
        return list(range(total_nodes(recipe, specs if specs is not None else [spec])))
    named = spec.placement in ("prefill", "decode", "agg")
    modes = (spec.placement,) if named else tuple(m for m, _ in recipe.roles.items())
    return sorted({o for ep in endpoints_of(recipe) if ep.mode in modes for o in ep.nodes})
