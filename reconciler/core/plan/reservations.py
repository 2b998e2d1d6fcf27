"""Reservations: when one will take an allocation's nodes, and which nodes new allocations avoid. Pure.

The policy (docs/operations.md, "Reservations"):

- A reservation *threatens* a running allocation when it covers one of the allocation's nodes,
  starts before the allocation's end (its granted end; unlimited: any time), has not ended, and
  does not include the job: the job is not submitted into it (``slurm.reservation``), and
  neither its user nor its account is among the reservation's users or accounts. Slurm lets
  such a job run into a maintenance reservation (``IGNORE_JOBS``) and the site ends it there.
- The hand-over (``plan/allocations.py``) counts the time left to the earliest threatening
  reservation's start as the job's time left: the successor is submitted, and the workers move,
  before the reservation begins. A reservation already active over a running job of ours (it
  was created over it) leaves it no time at all: hand-over now.
- New allocations exclude the nodes of every reservation (not including the recipe) that is
  active or starts during their expected life (their time limit; unlimited: any reservation).

Time is an argument; reservations come from ``scontrol show reservation``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from reconciler.timefmt import iso


@dataclass(frozen=True)
class Reservation:
    name: str
    start: float
    end: float
    nodes: frozenset[str]
    users: frozenset[str] = frozenset()  # "-alice": everyone but alice
    accounts: frozenset[str] = frozenset()
    flags: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Member:
    """Who a job is, as a reservation sees it."""

    user: str
    account: str | None = None
    reservations: frozenset[str] = frozenset()  # the names the job was submitted into


def _in(name: str | None, names: frozenset[str]) -> bool:
    if not name or not names:
        return False
    if all(n.startswith("-") for n in names):  # a negated list: everyone but these
        return f"-{name}" not in names
    return name in names


def includes(r: Reservation, m: Member) -> bool:
    return r.name in m.reservations or _in(m.user, r.users) or _in(m.account, r.accounts)


def threat(nodes: Iterable[str], end: float | None, reservations: Iterable[Reservation], now: float,
           m: Member) -> tuple[float, str] | None:
    """(when the job must be gone, why) for the earliest reservation over its nodes that begins
    before its end ``end`` (None: unlimited), or None."""
    mine = set(nodes)
    hits = []
    for r in reservations:
        on = sorted(r.nodes & mine)
        if not on or r.end <= now or includes(r, m) or (end is not None and r.start >= end):
            continue
        hits.append((r.start, f"reservation {r.name} takes {','.join(on)} from {iso(r.start)}"))
    return min(hits, default=None)


def reserved_nodes(reservations: Iterable[Reservation], now: float, life: float | None, m: Member) -> list[str]:
    """The nodes a new allocation with an expected life of ``life`` seconds (None: unlimited)
    avoids: those of every reservation not including it that is active or starts within it,
    soonest first (the first ones matter most when not all can be avoided)."""
    out: list[str] = []
    for r in sorted(reservations, key=lambda r: (r.start, r.name)):
        if r.end <= now or includes(r, m) or (life is not None and r.start >= now + life):
            continue
        out += [n for n in sorted(r.nodes) if n not in out]
    return out
