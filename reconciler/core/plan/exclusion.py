"""placeable_exclusion: the one rule that bounds every node exclusion so a worker stays placeable. Pure.

Several policies want nodes left out of new allocations: suspect nodes after a node failure
(``nodes.py``), quarantined nodes after repeated worker failures (``quarantine.py``), nodes
reserved during the allocation's life (``reservations.py``). Each is right alone; together
they could exclude so many nodes that an allocation can never start — worse than any bad
node. This function is the only place that decides how far exclusion may go: the wishes come
in priority order, and the longest prefix that leaves at least ``need`` nodes of the partition
is kept. Nodes outside the partition cost nothing and are always kept.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def placeable_exclusion(wanted: Iterable[str], nodes: Sequence[str], need: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(excluded, not excluded so that ``need`` nodes remain) for exclusion wishes ``wanted``,
    most important first, among the partition's ``nodes``. ``nodes`` empty: the partition is
    not known (a driver without one): every wish is kept."""
    order: list[str] = []
    for n in wanted:
        if n not in order:
            order.append(n)
    if not nodes:
        return tuple(order), ()
    pool = set(nodes)
    kept: list[str] = []
    dropped: list[str] = []
    for n in order:
        if n in pool and len(pool) - 1 < need:
            dropped.append(n)  # excluding it would leave fewer nodes than the allocation needs
            continue
        kept.append(n)
        pool.discard(n)
    return tuple(kept), tuple(dropped)
