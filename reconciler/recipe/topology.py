"""Where workers go: logical nodes and GPUs for every worker of a recipe.

Pure. Nodes are *ordinals* (0..N-1) of the recipe's logical node list; the
reconciler maps ordinals onto real hostnames once Slurm has granted them, and
``render`` maps them onto fake names. Rules (srtctl's, see docs/recipes.md):

- a worker with ``gpus >= gpus_per_node`` takes ceil(gpus / gpus_per_node) whole
  consecutive nodes;
- partial-node workers pack onto a node by GPU offset (or one per node with
  ``resources.spread_workers``);
- roles take consecutive node ranges in the order prefill, decode, agg;
  ``decode.nodes: 0`` / ``colocate`` places decode on the prefill nodes' spare GPUs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal, Protocol

from reconciler.errors import KeyedError
from reconciler.labels import engine_role

Mode = Literal["prefill", "decode", "agg"]
MODES: tuple[Mode, ...] = ("prefill", "decode", "agg")


class TopologyError(KeyedError):
    """Workers that do not fit the recipe's nodes, at the key that says so."""


@dataclass(frozen=True)
class RoleLayout:
    """A role's resolved size: how many nodes it reserves, workers, GPUs per worker."""

    mode: Mode
    nodes: int  # 0 = colocated on the prefill nodes
    workers: int
    gpus: int
    colocate: bool = False


@dataclass(frozen=True)
class Endpoint:
    """One logical worker: the unit of scaling, restart and rollout."""

    mode: Mode
    index: int
    nodes: tuple[int, ...]  # node ordinals, leader first
    gpus: tuple[int, ...]  # GPU indices used on each of its nodes
    gpus_per_node: int
    slot: int = 0  # the life slot its ports belong to (world.life_name): a surge life takes the other
    # shadow-engine recovery: engine k of the worker (0 = the worker itself); each engine is a
    # unit of its own (own ports, own restarts), named after its role ``<mode>-e<k>``
    engine: int = 0

    @property
    def role(self) -> str:
        return engine_role(self.mode, self.engine)

    @property
    def name(self) -> str:
        return f"{self.role}_{self.index}"

    @property
    def life(self) -> str:
        """The port owner's unit part: the name, or ``<name>@b`` in slot 1."""
        return f"{self.name}@b" if self.slot else self.name

    @property
    def total_gpus(self) -> int:
        return len(self.gpus) * len(self.nodes)

    @property
    def partial_node(self) -> bool:
        return len(self.gpus) < self.gpus_per_node


@dataclass(frozen=True)
class Process:
    """One physical process of an endpoint: a node, its GPUs and its ports."""

    endpoint: Endpoint
    node: str  # hostname (real or fake)
    node_rank: int
    leader: str  # hostname of the endpoint's first node
    hosts: tuple[str, ...]  # every node of the endpoint, leader first
    ports: dict[str, int] = field(default_factory=dict)

    @property
    def mode(self) -> Mode:
        return self.endpoint.mode

    @property
    def index(self) -> int:
        return self.endpoint.index

    @property
    def gpus(self) -> tuple[int, ...]:
        return self.endpoint.gpus

    @property
    def http_port(self) -> int:
        return self.ports["http"]


def one_node_split(layouts: dict[Mode, RoleLayout], prefill_nodes_set: bool, decode_nodes_set: bool,
                   gpus_per_node: int, spread: bool, pd_colocation: bool = False) -> dict[Mode, RoleLayout]:
    """srtctl's one-node job for a disaggregated recipe, in its two cases:

    - the recipe names no node count: with neither ``prefill.nodes`` nor ``decode.nodes`` set it
      is not disaggregated for the node count (src/srtctl/core/schema.py ``is_disaggregated``,
      ``total_nodes``: ``agg_nodes or 1``);
    - ``pd_colocation``: the vLLM engine's ``allow_prefill_decode_colocation`` with prefill and
      decode workers whose GPUs all fit on one node (backends/vllm.py
      ``should_colocate_prefill_decode``): ``SrtConfig.total_nodes`` is then 1 whatever
      ``prefill_nodes``/``decode_nodes`` say (a 1P1D of 1 + 4 GPUs with one node each: one node).

    The job is one node, and ``core/topology.py allocate_endpoints`` places decode after prefill
    with its one cursor, on the same node's next GPUs (a 1P4D recipe of 1-GPU workers: prefill on
    GPU 0, decode on GPUs 1-4); without either, it starts decode on a node of its own. We sized
    each role its own nodes and took two. When the workers do not fit on one node srtctl stops
    ("Not enough nodes") in the first case and keeps a node set per role in the second; we keep a
    node set per role in both (docs/recipes.md)."""
    pre, dec = layouts.get("prefill"), layouts.get("decode")
    if pre is None or dec is None or spread:
        return layouts
    # srtctl colocates only with workers in both roles (should_colocate_prefill_decode)
    colocating = pd_colocation and pre.workers > 0 and dec.workers > 0
    if (prefill_nodes_set or decode_nodes_set) and not colocating:
        return layouts
    if max(pre.gpus, dec.gpus) > gpus_per_node or pre.workers * pre.gpus + dec.workers * dec.gpus > gpus_per_node:
        return layouts
    return {**layouts, "prefill": RoleLayout("prefill", 1, pre.workers, pre.gpus),
            "decode": RoleLayout("decode", 0, dec.workers, dec.gpus, colocate=True)}


def allocate(
    layouts: dict[Mode, RoleLayout], gpus_per_node: int, spread: bool = False
) -> tuple[list[Endpoint], int]:
    """Place every worker of every role. Returns the endpoints and the node count."""
    endpoints: list[Endpoint] = []
    next_node = 0
    # per-node GPUs in use, for packing and for colocation onto prefill nodes
    used: dict[int, int] = {}
    prefill_range: tuple[int, int] | None = None
    for mode in MODES:
        lay = layouts.get(mode)
        if lay is None:
            continue
        if lay.colocate:
            if prefill_range is None:
                raise TopologyError(f"roles.{mode}.nodes", "colocation needs a prefill role to share nodes with")
            first, count = prefill_range
            # srtctl places workers with one cursor over the job's nodes (core/topology.py
            # allocate_endpoints): decode goes on from where the last prefill worker ended, never
            # back into a gap on an earlier prefill node
            cursor = max((n for n in range(first, first + count) if used.get(n)), default=first)
            first, count = cursor, first + count - cursor
        else:
            first, count = next_node, lay.nodes
            next_node += lay.nodes
        if mode == "prefill":
            prefill_range = (first, count)
        endpoints += _place_role(lay, first, count, gpus_per_node, used, spread)
    return endpoints, next_node


def _place_role(
    lay: RoleLayout, first: int, count: int, gpn: int, used: dict[int, int], spread: bool
) -> list[Endpoint]:
    out: list[Endpoint] = []
    key = f"roles.{lay.mode}"
    if lay.gpus >= gpn:
        span = math.ceil(lay.gpus / gpn)
        if lay.gpus % gpn:
            raise TopologyError(
                f"{key}.gpus",
                f"a multi-node worker must use whole nodes: {lay.gpus} GPUs is not a multiple of gpus_per_node={gpn}",
            )
        need = span * lay.workers
        if need > count:
            raise TopologyError(
                f"{key}.workers",
                f"{lay.workers} workers x {lay.gpus} GPUs need {need} nodes of {gpn} GPUs, the role has {count}",
            )
        for i in range(lay.workers):
            nodes = tuple(range(first + i * span, first + (i + 1) * span))
            for n in nodes:
                used[n] = gpn
            out.append(Endpoint(lay.mode, i, nodes, tuple(range(gpn)), gpn))
        return out
    node = first
    for i in range(lay.workers):
        while node < first + count and (gpn - used.get(node, 0) < lay.gpus or (spread and used.get(node, 0))):
            node += 1
        if node >= first + count:
            raise TopologyError(
                f"{key}.workers",
                f"{lay.workers} workers x {lay.gpus} GPUs do not fit on {count} node(s) of {gpn} GPUs"
                + (" (colocated on the prefill nodes' spare GPUs)" if lay.colocate else ""),
            )
        offset = used.get(node, 0)
        used[node] = offset + lay.gpus
        out.append(Endpoint(lay.mode, i, (node,), tuple(range(offset, offset + lay.gpus)), gpn))
    return out


class Laid(Protocol):
    """What an allocation reads of a recipe (``recipe.model.Recipe``, which imports this module)."""

    resources: Any

    def role_layouts(self) -> dict[Mode, RoleLayout]: ...


class Allocation:
    """A recipe's role layouts and its workers over node ordinals, each computed at most once per
    build and handed to every engine of the recipe (``Backend.bind``), never re-derived from the
    recipe by each. Lazy, so that an engine's own checks run before them as they always did: a
    recipe's first error stays the one it reports. ``allocate`` itself takes numbers only (srtctl's
    ``allocate_endpoints``: worker counts, GPUs per worker and node), not the recipe."""

    def __init__(self, recipe: Laid):
        self._recipe = recipe

    @cached_property
    def layouts(self) -> dict[Mode, RoleLayout]:
        return self._recipe.role_layouts()

    @cached_property
    def _placed(self) -> tuple[tuple[Endpoint, ...], int]:
        res = self._recipe.resources
        endpoints, nodes = allocate(self.layouts, res.gpus_per_node, res.spread_workers)
        return tuple(endpoints), nodes

    @property
    def endpoints(self) -> tuple[Endpoint, ...]:
        return self._placed[0]

    @property
    def nodes(self) -> int:
        """The worker nodes the file's layout takes (srtctl's node list)."""
        return self._placed[1]


def processes_per_node(ep: Endpoint, hostnames: list[str]) -> list[tuple[str, int]]:
    """(hostname, node_rank) for each node of an endpoint."""
    return [(hostnames[n], r) for r, n in enumerate(ep.nodes)]
