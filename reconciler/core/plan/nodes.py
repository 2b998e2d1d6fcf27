"""Suspect nodes: after a node failure, which nodes new allocations avoid, and for how long. Pure.

The policy (docs/operations.md, "Node failures"):

- An allocation that ends ``NODE_FAIL`` (or ``BOOT_FAIL``) lost a node. Which one: the nodes of
  the allocation that Slurm reports unusable (DOWN, DRAIN, FAIL, NOT_RESPONDING) with Slurm's
  reason. When every one of them is already back (``ReturnToService`` can return a node within
  a second), Slurm no longer says which failed: every node of the allocation becomes suspect —
  a healthy node sitting out a cool-down costs less than a flapping one taking the replacement
  down with it.
- A suspect node is excluded from every new allocation (``sbatch --exclude``) while Slurm
  reports it unusable, and for ``cooldown`` seconds after Slurm first reports it usable again.
  A node that fails again during its cool-down starts over.
- Only the lost allocation's workers move: the plan replaces a lost allocation like any missing
  one; the others' allocations are not touched (the exclusion applies to submissions only).
- An allocation that ran and is pending again was requeued by Slurm (a site's ``JobRequeue``,
  or a job submitted before we passed ``--no-requeue``): it is released so a fresh one, with
  the exclusion, replaces it now rather than after Slurm's requeue delay. A running allocation
  holding fewer nodes than it asked for (only possible with ``--no-kill``) is released too.
- A pending allocation submitted with an exclusion that has since ended (the node's cool-down
  is over) is released and submitted again: Slurm would keep the old exclusion.

Time is an argument; node states come from the shell (``scontrol show node``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from reconciler.world import Alloc

NODE_LOSS_STATES = frozenset({"NODE_FAIL", "BOOT_FAIL"})
USABLE_BASE = frozenset({"IDLE", "MIXED", "ALLOCATED", "COMPLETING"})
UNUSABLE_FLAGS = frozenset({"DRAIN", "DRAINING", "DRAINED", "NOT_RESPONDING", "FAIL", "FAILING", "POWERED_DOWN",
                            "POWERING_DOWN", "REBOOT_REQUESTED", "REBOOT_ISSUED", "MAINTENANCE", "RESERVED"})
DEFAULT_COOLDOWN = 120.0
SUBMIT_HOLD_S = 30.0  # a new allocation waits at most this long for a node of its partition to be back


@dataclass(frozen=True)
class Suspect:
    node: str
    reason: str  # Slurm's words (the node's Reason=, or the job's end state)
    since: float  # when it was last seen failing
    back_at: float | None = None  # when Slurm first reported it usable again; the cool-down runs from here


NodeStates = Mapping[str, tuple[str, str]]  # node -> (Slurm's State=, Reason=)


def node_usable(state: str) -> bool:
    """``IDLE``, ``MIXED+...``: usable; ``DOWN+NOT_RESPONDING``, ``IDLE+DRAIN``: not."""
    base, *flags = state.upper().rstrip("*~#!%$@^-").split("+")
    return base in USABLE_BASE and not UNUSABLE_FLAGS & set(flags)


def lost_nodes(job_state: str, job_nodes: Iterable[str], states: NodeStates) -> dict[str, str]:
    """node -> reason for the nodes an allocation that ended ``job_state`` lost ({} when it lost none).
    ``job_state`` "" is a job that just left the queue, its end not known yet: the nodes Slurm
    reports unusable already count (the replacement is submitted in this very tick)."""
    if job_state and job_state.upper() not in NODE_LOSS_STATES:
        return {}
    nodes = list(job_nodes)
    down = {n: (states[n][1] or states[n][0]) for n in nodes if n in states and not node_usable(states[n][0])}
    if down or not job_state:
        return down
    return {n: f"job ended {job_state.upper()}; Slurm reports the node back already" for n in nodes}


def update(suspects: Mapping[str, Suspect], lost: Mapping[str, str], states: NodeStates, now: float,
           cooldown: float) -> dict[str, Suspect]:
    """The suspect set after this tick: new losses in, cool-downs run from a node's return, ended
    cool-downs out. A node absent from ``states`` (not asked this tick) keeps its record."""
    out = dict(suspects)
    for node, reason in lost.items():
        out[node] = Suspect(node, reason, now)  # a fresh failure restarts the clock
    for node, s in list(out.items()):
        st = states.get(node)
        if st is None:
            continue
        if not node_usable(st[0]):
            out[node] = replace(s, back_at=None, reason=st[1] or s.reason)
        elif s.back_at is None:
            out[node] = replace(s, back_at=now)
        elif now - s.back_at >= cooldown:
            del out[node]
    return out


def excluded(suspects: Mapping[str, Suspect]) -> tuple[str, ...]:
    """The nodes every new allocation excludes."""
    return tuple(sorted(suspects))


def placeable_exclusion(suspects: Mapping[str, Suspect], need: int, pool: Iterable[str] | None,
                        also: Iterable[str] = ()) -> tuple[str, ...]:
    """The suspects an allocation of ``need`` nodes excludes, so that it stays placeable: at most as
    many of the partition's nodes (``pool``; None: not known, all are excluded) as leave ``need``
    beside the recipe's own exclusions (``also``). Nodes Slurm still reports failed go first (the
    most recent failure first), then nodes back in their cool-down (the most recently back first):
    a suspect that serves beats a worker that cannot be placed at all."""
    if pool is None:
        return excluded(suspects)
    pool_set = set(pool) - set(also)
    room = max(0, len(pool_set) - need)
    inside = [s for s in suspects.values() if s.node in pool_set]
    order = sorted(inside, key=lambda s: (s.back_at is not None, -(s.back_at or s.since), s.node))
    keep_out = {s.node for s in order[:room]}
    return tuple(sorted(keep_out | {n for n in suspects if n not in pool_set}))


def submit_hold(suspects: Mapping[str, Suspect], pool: Iterable[str] | None, also: Iterable[str],
                now: float) -> str | None:
    """Why a new allocation waits before it is submitted, or None. While no node of its partition
    (``pool``, less the recipe's own exclusions ``also``) is usable — every one suspect and not
    back: a restarted controller that has not heard from its nodes — a job submitted now starts
    only at Slurm's next scheduling pass (measured: 26 s after the node was back, the backfill
    interval), while one submitted once a node is back starts at once. So it waits, at most
    ``SUBMIT_HOLD_S`` from the loss."""
    skip = set(also)
    nodes = [n for n in pool or () if n not in skip]
    if not nodes or any(n not in suspects or suspects[n].back_at is not None for n in nodes):
        return None
    if now - min(suspects[n].since for n in nodes) >= SUBMIT_HOLD_S:
        return None
    return (f"no node of its partition is usable yet ({', '.join(f'{n}: {suspects[n].reason}' for n in nodes)}):"
            f" submitted once one is back, at most {SUBMIT_HOLD_S:g}s after the loss")


def cooldown_ends(suspects: Mapping[str, Suspect], cooldown: float) -> float | None:
    """The next moment a suspect could leave the set (None: none is back yet)."""
    ends = [s.back_at + cooldown for s in suspects.values() if s.back_at is not None]
    return min(ends) if ends else None


def to_release(previous: Mapping[str, Alloc], current: Iterable[Alloc]) -> dict[str, str]:
    """job id -> why, for live allocations that lost their nodes without ending: requeued by
    Slurm after running, or running on fewer nodes than asked for."""
    out = {}
    for a in current:
        before = previous.get(a.job_id)
        if a.state in ("PENDING", "REQUEUED") and before is not None and before.state == "RUNNING":
            out[a.job_id] = f"requeued by Slurm after running on {','.join(before.nodes) or '?'} ({a.reason or a.state})"
        elif a.state == "RUNNING" and 0 < len(a.nodes) < a.count:
            out[a.job_id] = f"runs on {len(a.nodes)} of its {a.count} nodes"
    return out


def stale_pending(pending: Mapping[str, tuple[str, ...]], now_excluded: tuple[str, ...]) -> list[str]:
    """Pending allocations (job id -> the nodes excluded when it was submitted) that exclude a node
    no longer suspect: released and submitted again, or a job excluding a node that came back
    could wait for resources that exist (Slurm keeps the exclusion it was given)."""
    return sorted(j for j, exc in pending.items() if set(exc) - set(now_excluded))
