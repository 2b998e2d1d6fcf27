"""The recipe's node layout — its workers over node ordinals and srtctl's dedicated node — and
where its service instances go on it: the dedicated node, the head, or one instance per node of
a worker-node placement. Pure.

``NodeLayout`` is computed once per build (``desired/elastic.py`` at the autoscaler's counts);
every stage that asks which ordinals exist asks it, never the recipe again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from reconciler.desired.services.types import WORKER_NODES, ServiceSpec
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
    file_endpoints: tuple[Endpoint, ...] = ()  # the file's workers at its own count: instance indices
    # (role, workers) the file's ordinals are packed for, written into each allocation's label
    # (desired/baseline.py: the file's counts, or those the live allocations were packed for)
    packed: tuple[tuple[str, int], ...] = ()

    def elastic(self, ordinal: int) -> bool:
        return self.elastic_from is not None and ordinal >= self.elastic_from

    def nodes_of(self, modes: tuple[str, ...]) -> list[int]:
        return sorted({o for ep in self.endpoints if ep.mode in modes for o in ep.nodes})


def dedicated_ordinal(nodes: int, specs: list[ServiceSpec]) -> int | None:
    """srtctl's ``dedicated``: one more node after the workers' ``nodes``, for the services only
    (None: not asked)."""
    if any(s.placement == "dedicated" and not s.external for s in specs):
        return nodes
    return None


def file_layout(endpoints: tuple[Endpoint, ...], nodes: int, specs: list[ServiceSpec]) -> NodeLayout:
    """The layout the file asks for: its workers (each engine checked its roles) over its ``nodes``
    worker nodes, and the dedicated node when a service asks for one. What ``render`` shows."""
    return NodeLayout(endpoints, dedicated_ordinal(nodes, specs), nodes, packing(endpoints), None, endpoints)


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
    """(instance index, node ordinal) of a service's instances: srtctl's one per node, on the nodes
    that hold a worker at the current count. The index is the node's position at the file's count
    (``all``: its ordinal, the same thing there), so a count change never renames the instance on a
    node that stays; on an extra worker's node (``desired/elastic.py``) it is the ordinal itself:
    past every position, and the same whichever other extra workers exist."""
    if spec.placement == "dedicated":
        return [] if lay.dedicated is None else [(0, lay.dedicated)]
    if spec.placement not in WORKER_NODES:  # head, and infra (the head here)
        # scaled to zero, no node is held, the head neither: nothing waits for it
        held = bool(lay.endpoints) or lay.dedicated is not None or not lay.file_endpoints
        return [(0, 0)] if held else []
    named = spec.placement in ("prefill", "decode", "agg")
    modes = (spec.placement,) if named else ("prefill", "decode", "agg")
    held = lay.nodes_of(modes)
    if spec.placement == "all":  # every node of the deployment, the dedicated one included
        return [(o, o) for o in sorted({*held, *([lay.dedicated] if lay.dedicated is not None else [])})]
    position = {o: i for i, o in enumerate(sorted({o for ep in lay.file_endpoints if ep.mode in modes
                                                   for o in ep.nodes}))}
    return [(position.get(o, o), o) for o in held]
