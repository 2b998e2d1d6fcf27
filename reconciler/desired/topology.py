"""Stage 1 of the desired state: recipe -> topology. Pure, and the same every tick for a spec.

What a recipe asks for before anything is observed: its workers over node ordinals (each
engine's layout rules), the services it runs, srtctl's dedicated node when one is reserved,
and the engines per worker (shadow-engine recovery). The next stage places it on allocations.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass

from reconciler.backends.failover import engines_per_worker
from reconciler.backends.registry import endpoints_of
from reconciler.desired.services.spec import ServiceSpec, resolve
from reconciler.desired.services.layout import dedicated_ordinal
from reconciler.desired.scale import scaled
from reconciler.recipe.model import Recipe
from reconciler.recipe.topology import Endpoint


@dataclass(frozen=True)
class Topology:
    recipe: Recipe
    generation: str  # hash of the spec: status observedGeneration
    endpoints: tuple[Endpoint, ...]  # the workers, over node ordinals
    services: tuple[ServiceSpec, ...]  # implied, then declared (external ones included)
    dedicated: int | None  # the ordinal of srtctl's dedicated services node, when one is reserved
    engines: int  # engines per worker: 1, or 1 + shadow engines

    @property
    def reserved(self) -> tuple[Endpoint, ...]:
        """The dedicated node, held by an allocation like a worker's node, with no worker on it."""
        if self.dedicated is None:
            return ()
        return (Endpoint("dedicated", 0, (self.dedicated,), (), self.recipe.resources.gpus_per_node),)  # type: ignore[arg-type]


def generation(recipe: Recipe) -> str:
    doc = recipe.model_dump(mode="json", by_alias=True)
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:12]


def topology(recipe: Recipe, gen: str | None = None, counts: Mapping[str, int] | None = None) -> Topology:
    """``counts``: the autoscaler's workers per role (desired/scale.py); the generation stays the file's."""
    gen = gen or generation(recipe)
    recipe = scaled(recipe, counts) if counts else recipe
    specs = resolve(recipe)
    return Topology(recipe, gen, tuple(endpoints_of(recipe)), tuple(specs),
                    dedicated_ordinal(recipe, specs), engines_per_worker(recipe))
