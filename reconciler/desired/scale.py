"""The autoscaler's counts, taken by the topology stage: the recipe with each role's ``workers``.

The autoscaler (``core/plan/autoscale.py`` decides, ``shell/elastic/autoscale.py`` keeps its memory)
hands the pipeline one ``Scale`` per recipe: a count per role (warm spares included) and the
workers kept out of the routers, still running: those that drain and the warm spares. The topology stage builds the recipe at those counts, so every stage
after it (placement, the sources, the frontend's worker list) sees one consistent recipe: there is
no second path that builds workers. The recipe's generation stays the file's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from reconciler.recipe.model import Recipe
from reconciler.recipe.topology import Mode, RoleLayout


@dataclass(frozen=True)
class Scale:
    counts: Mapping[str, int] = field(default_factory=dict)  # role -> workers to build
    draining: frozenset[str] = frozenset()  # unit names out of the routers, waiting to be stopped
    spares: frozenset[str] = frozenset()  # warm spares: built, Ready, out of the routers (core/plan/spares.py)

    def key(self) -> tuple:
        return tuple(sorted(self.counts.items()))


def scaled(recipe: Recipe, counts: Mapping[str, int], layouts: Mapping[Mode, RoleLayout]) -> Recipe:
    """``recipe`` with ``roles.<role>.workers`` set from ``counts``. Each worker keeps the GPUs the
    file gives it (``layouts``: the file's, computed once by the topology stage); the role's nodes
    follow from the count (a colocated role stays colocated)."""
    changed = {}
    for role, n in counts.items():
        lay = layouts.get(role)  # type: ignore[call-overload]
        if lay is None or lay.workers == n:
            continue
        rc = recipe.roles[role]
        nodes = rc.nodes if lay.colocate else None
        changed[role] = rc.model_copy(update={"workers": n, "gpus": lay.gpus, "nodes": nodes})
    if not changed:
        return recipe
    return recipe.model_copy(update={"roles": recipe.roles.model_copy(update=changed)})
