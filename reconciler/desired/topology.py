"""Stage 1 of the desired state: recipe -> topology. Pure, and the same every tick for a spec.

What a recipe asks for before anything is observed: its workers over node ordinals (each
engine's layout rules; the autoscaler's extra workers on nodes of their own: desired/elastic.py),
the services it runs, srtctl's dedicated node when one is reserved, and the engines per worker
(shadow-engine recovery). The next stage places it on allocations.

Facts every later stage reads are computed here once per build and carried down, never derived
from the recipe again: the role layouts and the endpoint allocation (``recipe.topology.Allocation``),
the recipe's backends, bound once (``backends.registry.engines``), the Mooncake store and the
discovery plane (``services.spec.Facts``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, replace

from reconciler.backends.failover import engines_per_worker
from reconciler.backends.registry import Engines, engines
from reconciler.desired.baseline import baseline, packing_of
from reconciler.desired.elastic import layout_at
from reconciler.desired.scale import scaled
from reconciler.desired.services.layout import NodeLayout, file_layout
from reconciler.desired.services.mooncake import store_of
from reconciler.desired.services.spec import Facts, ServiceSpec, discovery_of, resolve
from reconciler.recipe.model import Recipe
from reconciler.recipe.topology import Allocation, Endpoint
from reconciler.desired.spec_hash import SORTED_JSON


@dataclass(frozen=True)
class Topology:
    recipe: Recipe  # at the autoscaler's counts
    generation: str  # hash of the spec: status observedGeneration
    layout: NodeLayout  # the workers over node ordinals, the dedicated node (desired/elastic.py)
    services: tuple[ServiceSpec, ...]  # implied, then declared (external ones included)
    engines: int  # engines per worker: 1, or 1 + shadow engines
    backends: Engines  # the recipe's backends, bound once (to ``recipe``)
    facts: Facts  # the file's workers and nodes, the Mooncake store, the discovery plane

    @property
    def endpoints(self) -> tuple[Endpoint, ...]:
        return self.layout.endpoints

    @property
    def dedicated(self) -> int | None:
        """The ordinal of srtctl's dedicated services node, when one is reserved."""
        return self.layout.dedicated

    @property
    def reserved(self) -> tuple[Endpoint, ...]:
        """The dedicated node, held by an allocation like a worker's node, with no worker on it."""
        if self.dedicated is None:
            return ()
        return (Endpoint("dedicated", 0, (self.dedicated,), (), self.recipe.resources.gpus_per_node),)  # type: ignore[arg-type]


def generation(recipe: Recipe) -> str:
    doc = recipe.model_dump(mode="json", by_alias=True)
    return hashlib.sha256(SORTED_JSON.encode(doc).encode()).hexdigest()[:12]


def topology(recipe: Recipe, gen: str | None = None, counts: Mapping[str, int] | None = None,
             packed: Mapping[str, int] | None = None) -> Topology:
    """``counts``: the autoscaler's workers per role (desired/scale.py); the generation stays the file's,
    and so do the file's workers' places (desired/elastic.py). ``packed``: the workers per role the
    recipe's live allocations were packed for (``baseline.running_packing``): the workers an edit adds
    beyond them go on allocations of their own, the running ones stay (desired/baseline.py)."""
    gen = gen or generation(recipe)
    allocation = Allocation(recipe)  # the file's layouts and workers, whatever the counts
    at = scaled(recipe, counts, allocation.layouts) if counts else recipe
    # bound to the recipe the sources build from; the counts change no engine's checks or knobs
    backends = engines(at, allocation)
    eps = tuple(backends.endpoints())  # each engine checks its roles, then the shared allocation
    facts = Facts(allocation.layouts, eps, allocation.nodes, store_of(recipe), discovery_of(recipe))
    specs = resolve(recipe, facts)
    base = baseline(recipe, allocation, packed)
    if base is None:  # nothing runs, or it was packed for the file's counts: the file's own layout
        lay = layout_at(recipe, file_layout(eps, allocation.nodes, specs), counts, allocation.layouts)
    else:
        grown = {mode: lay.workers for mode, lay in allocation.layouts.items()}
        lay = layout_at(recipe, file_layout(base.endpoints, base.nodes, specs), counts, base.layouts, grown)
    lay = replace(lay, packed=packing_of((base or allocation).layouts))
    return Topology(at, gen, lay, tuple(specs), engines_per_worker(recipe), backends, facts)
