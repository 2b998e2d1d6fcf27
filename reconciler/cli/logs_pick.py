"""Which unit `reconciler logs NAME` means when no role is given: kubectl's habit of one obvious pod."""

from __future__ import annotations

from pathlib import Path

from reconciler.errors import ReconcilerError
from reconciler.recipe import namespaces
from reconciler.cli.operate import known_units
from reconciler.world import FRONTEND, SERVICE_PREFIX


def pick(state: Path, recipe: str, role: str | None, index: int | None) -> tuple[str, int]:
    """(role, index): the given ones; without a role, the frontend, else the recipe's only worker."""
    if role:
        return role, index or 0
    units = sorted(known_units(state, recipe))
    if f"{FRONTEND}_0" in units:
        return FRONTEND, 0
    workers = [u for u in units if not u.startswith(SERVICE_PREFIX)]
    if len(workers) == 1:
        r, _, i = workers[0].rpartition("_")
        return r, int(i)
    have = ", ".join(units) or "none yet"
    shown = namespaces.display(recipe)  # as the user wrote it: FOLDER/NAME
    raise ReconcilerError(f"{shown} has no frontend and {len(workers)} workers: name one "
                          f"(`logs {shown} -r ROLE -i N`); units with logs: {have}")
