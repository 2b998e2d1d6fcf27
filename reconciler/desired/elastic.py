"""Where the autoscaler's workers go: the file's layout kept, the extra workers on nodes of their own.

The file's workers keep their node ordinals and GPUs whatever the count — a count below the
file's drops the highest indices — so a change of count never moves a worker that runs, nor the
dedicated node, nor another role's workers. A worker beyond the file's count (index >= the
file's ``workers``) goes on nodes of its own, from ordinal ``EXTRA_BASE`` on — far past every
ordinal a file uses, so that an edit of the file's node count never lands the file's workers and
the extra ones on each other's jobs: each autoscaled role has a block sized for its ``max``, in
the order prefill, decode, agg, and its i-th extra worker takes the i-th span of the block (its
nodes, GPUs 0.. of each). Ordinals are logical: a large one costs nothing. Each is an allocation of
its own (``placement.place`` cuts there), sized for it alone: Slurm packs partial-node workers
onto shared nodes itself, and scaling one down releases exactly its GPUs.

An allocation over the file's ordinals is sized by the file's packing, never the current count
(``NodeLayout.gpus_on``): a worker brought back within the file's count finds its GPUs held, on
the job that runs and on a hand-over successor submitted while the role was scaled down. The
price: while a role is below its file count, its allocations keep the GPUs the file packs there
(an allocation with none of its workers left is released).

The file's layout here may be the file's at the counts the live allocations were packed for
(``desired/baseline.py``): then the workers a file edit adds beyond those counts are extra
workers too — within the autoscaler's block while it has room (its ``max``), past it in a region
of their own, from ``GROWN_BASE``, a fixed stride per role — so no edit of one role's count, nor
of another's, moves an extra worker that runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from reconciler.desired.services.layout import NodeLayout, packing
from reconciler.recipe.model import Recipe
from reconciler.recipe.topology import Endpoint, Mode, RoleLayout

EXTRA_BASE = 1 << 20  # the first extra worker's node ordinal (a file with more nodes: after them)
# a file edit's additions past the autoscaler's block: beyond every block (3 roles x MAX_WORKERS x
# MAX_NODES_PER_WORKER < 2**25), each role's from a fixed place, whatever the counts
GROWN_BASE = 1 << 30
GROWN_STRIDE = 1 << 27
ROLE_ORDER = ("prefill", "decode", "agg")


def layout_at(recipe: Recipe, file: NodeLayout, counts: Mapping[str, int] | None,
              layouts: Mapping[Mode, RoleLayout], grown: Mapping[str, int] | None = None) -> NodeLayout:
    """``file`` (the file's layout, or the file's at the counts its live allocations were packed
    for) at the autoscaler's ``counts`` (role -> workers); ``layouts``: ``file``'s role layouts (the
    topology stage's, computed once); ``grown``: the file's own counts when they differ from
    ``layouts``' (an edit since the allocations were submitted: the count a role without the
    autoscaler's is at)."""
    if not counts and not grown:
        return file
    cfg = recipe.reconcile.autoscale
    maxes = dict((role, rs.max) for role, rs in cfg.roles.items()) if cfg is not None else {}
    gpn = recipe.resources.gpus_per_node
    first_extra = max(EXTRA_BASE, file.file_nodes + (file.dedicated is not None))
    base = first_extra
    out: list[Endpoint] = []
    extra: list[Endpoint] = []
    for mode, lay in layouts.items():
        f = lay.workers
        wanted = (grown or {}).get(mode, f)
        room = max(maxes.get(mode, f), f)  # the block is sized for max: one role's count never moves another's
        count = min((counts or {}).get(mode, wanted), max(room, wanted))
        out += [ep for ep in file.endpoints if ep.mode == mode and ep.index < count]
        span = -(-lay.gpus // gpn) if lay.gpus >= gpn else 1
        gpus = tuple(range(min(lay.gpus, gpn)))
        grown_at = GROWN_BASE + ROLE_ORDER.index(mode) * GROWN_STRIDE - room * span
        mine = [Endpoint(mode, i, tuple(range(o, o + span)), gpus, gpn)
                for i in range(f, count) for o in [base + (i - f) * span if i < room else grown_at + i * span]]
        out += mine
        extra += mine
        base += (room - f) * span
    return replace(file, endpoints=tuple(out),
                   dedicated=file.dedicated if out else None,  # at zero nothing is held, the services' node neither
                   gpus_on={**file.gpus_on, **packing(extra)}, elastic_from=first_extra)
