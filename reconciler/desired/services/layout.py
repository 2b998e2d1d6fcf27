"""The recipe's node layout — its workers over node ordinals and srtctl's dedicated node — and
where its service instances go on it: the dedicated node, the head, or one instance per node of
a worker-node placement. Pure.

``NodeLayout`` is computed once per build (``desired/elastic.py`` at the autoscaler's counts);
every stage that asks which ordinals exist asks it, never the recipe again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from reconciler.backends.registry import endpoints_of
from reconciler.desired.runtime import node_count
from reconciler.desired.services.types import WORKER_NODES, ServiceSpec
from reconciler.recipe.model import Recipe
from reconciler.recipe.topology import Endpoint


@dataclass(frozen=True)
class NodeLayout:
    endpoints: tuple[Endpoint, ...]  # the workers, over node ordinals
    dedicated: int | None  # srtctl's dedicated services node, when one is reserved
    file_nodes: int  # the ordinals 0..file_nodes-1 are the file's worker nodes (srtctl's node list)
    # ordinal -> GPUs per node an allocation there holds: the file's packing on the file's ordinals
    # (whatever the count), each extra worker's own on its ordinals
    gpus_on: Mapping[int, int] = field(default_factory=dict)
    elastic_from: int | None = None  # the extra workers' first ordinal: each is an allocation of its own

    def elastic(self, ordinal: int) -> bool:
        return self.elastic_from is not None and ordinal >= self.elastic_from

    def nodes_of(self, modes: tuple[str, ...]) -> list[int]:
        return sorted({o for ep in self.endpoints if ep.mode in modes for o in ep.nodes})


def dedicated_ordinal(recipe: Recipe, specs: list[ServiceSpec]) -> int | None:
    """srtctl's ``dedicated``: one more node after the workers', for the services only (None: not asked)."""
    if any(s.placement == "dedicated" and not s.external for s in specs):
        return node_count(recipe)
    return None


def file_layout(recipe: Recipe, specs: list[ServiceSpec]) -> NodeLayout:
    """The layout the file asks for (each engine checks its roles): what ``render`` shows."""
    eps = tuple(endpoints_of(recipe))
    return NodeLayout(eps, dedicated_ordinal(recipe, specs), node_count(recipe), packing(eps))


def packing(endpoints: tuple[Endpoint, ...] | list[Endpoint]) -> dict[int, int]:
    """Ordinal -> the GPUs per node its workers use (the highest GPU index + 1)."""
    out: dict[int, int] = {}
    for ep in endpoints:
        for o in ep.nodes:
            out[o] = max(out.get(o, 0), max(ep.gpus) + 1 if ep.gpus else 0)
    return out


def total_nodes(lay: NodeLayout) -> int:
    """The nodes ``render`` names: the file's worker nodes and the dedicated one."""
    return lay.file_nodes + (lay.dedicated is not None)


def instance_ordinals(lay: NodeLayout, spec: ServiceSpec) -> list[tuple[int, int]]:
    """(instance index, node ordinal) of a service's instances (srtctl: one per node, index =
    position). On an extra worker's node (``desired/elastic.py``) the index is the ordinal itself:
    past every position, and the same whichever other extra workers exist."""
    if spec.placement == "dedicated":
        return [] if lay.dedicated is None else [(0, lay.dedicated)]
    if spec.placement not in WORKER_NODES:
        return [(0, 0)]  # head, and infra (the head here)
    if spec.placement == "all":  # every allocated node, the dedicated one included
        ordinals = sorted({*range(lay.file_nodes), *lay.nodes_of(("prefill", "decode", "agg"))}
                          | ({lay.dedicated} if lay.dedicated is not None else set())) if lay.endpoints else []
    else:
        named = spec.placement in ("prefill", "decode", "agg")
        ordinals = lay.nodes_of((spec.placement,) if named else ("prefill", "decode", "agg"))
    return [(o if lay.elastic(o) else i, o) for i, o in enumerate(ordinals)]
