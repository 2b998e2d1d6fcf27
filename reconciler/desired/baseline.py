"""What the recipe's live allocations were packed for: an edit that adds workers moves none that runs.

srtctl packs a file's workers onto nodes (``recipe.topology.allocate``: ``workers: 2, gpus: 1`` on
8-GPU nodes is two workers on one node), and each allocation is sized by that packing
(``NodeLayout.gpus_on``). Slurm cannot grow a running job (``scontrol update`` only takes nodes
away; GRES are fixed for the job's life), so packing a file edit's new workers beside the running
ones needs a new, larger job and every running worker moved onto it: each pays its engine's cold
start again (a vLLM worker ~100 s) for nothing. Instead, each allocation's label records the workers
per role its layout was packed for (``packed=agg:1`` in its ``--comment``): the *baseline*. While
any allocation of the recipe lives, the layout is the file's at the baseline's counts, and the
workers an edit adds beyond them are extra workers (``desired/elastic.py``): nodes and an
allocation of their own, sized for each alone, as the autoscaler's; a count back down drops the
highest indices — the additions — and releases their jobs. A count below the baseline keeps the
baseline's places (its job keeps the GPUs it was packed with, as below an autoscaled file count).

When nothing lives (a fresh deployment, or every job released) the file's own packing is used:
srtctl's layout. The baseline is read from Slurm's labels only, so a reconciler restart, or a
deleted ``state/``, decides the same. A job submitted later (a hand-over or resize successor, a
replacement after a node failure, an extra worker's job) is labelled with the baseline it was
built with, so the baseline lasts while anything of the recipe does. Jobs labelled before this
was written carry no baseline: the file's packing, as before (a grown role waits for a successor
sized for it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from reconciler.desired.scale import scaled
from reconciler.recipe.model import Recipe
from reconciler.recipe.topology import Allocation, Mode, RoleLayout, TopologyError
from reconciler.world import Alloc


def running_packing(allocs: Iterable[Alloc]) -> dict[str, int] | None:
    """Role -> workers the recipe's live allocations were packed for (None: none is labelled so).
    Jobs of one deployment agree (each copies the baseline it was built with); should two disagree
    (a role added by an edit is in the later one only), the lowest allocation index's, then the
    oldest job's, label wins for each role: the same answer on every tick and after a restart."""
    labelled = sorted((a for a in allocs if a.live and a.packed is not None),
                      key=lambda a: (a.index, int(a.job_id) if a.job_id.isdigit() else 0, a.job_id))
    if not labelled:
        return None
    out: dict[str, int] = {}
    for a in labelled:
        for role, n in a.packed or ():
            out.setdefault(role, n)
    return out


def baseline(recipe: Recipe, file: Allocation, packed: Mapping[str, int] | None) -> Allocation | None:
    """The recipe's layout at the counts its live allocations were packed for; None: the file's own
    (``file``), because nothing is labelled, the counts are the file's, or this file cannot be laid
    out at them (a role's ``gpus`` edited so that they no longer fit: re-packed, as before). A role
    the label does not name (added by the edit) is laid out at the file's count."""
    if not packed:
        return None
    counts = {mode: packed.get(mode, lay.workers) for mode, lay in file.layouts.items()}
    if all(counts[mode] == lay.workers for mode, lay in file.layouts.items()):
        return None
    base = Allocation(scaled(recipe, counts, file.layouts))
    try:
        base.endpoints  # noqa: B018 - lays it out now: a layout that no longer fits is the file's
    except TopologyError:
        return None
    return base


def packing_of(layouts: Mapping[Mode, RoleLayout]) -> tuple[tuple[str, int], ...]:
    """The label's form of a layout's counts: (role, workers), sorted by role."""
    return tuple(sorted((str(mode), lay.workers) for mode, lay in layouts.items()))
