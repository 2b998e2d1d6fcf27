"""requeue_after: the earliest moment anything in the plan would change on its own.

While something is in motion (an action was planned, a worker is starting, a step is
shutting down) the loop looks again after ``ACTIVE_INTERVAL``; otherwise it sleeps until
the next deadline (a backoff ends, a startup grace runs out, a backoff counter resets, an
action may be retried, a pending allocation is due another look) — or until a file event
or the resync, whichever comes first. None: nothing is scheduled.

Waiting on Slurm's queue is not motion: Slurm asks tools not to poll it fast. A pending
allocation is looked at again after half the time it has waited so far (at least
``PENDING_MIN``), so one that starts at once is noticed within a second or two and one
queued behind others costs a query per resync, like a settled recipe.
"""

from __future__ import annotations

from collections.abc import Iterable

from reconciler.world import Alloc

ACTIVE_INTERVAL = 0.5  # seconds between ticks while something is converging
PENDING_MIN = 1.0  # never look at a pending allocation more often than this


def pending_recheck(allocs: Iterable[Alloc], now: float) -> float | None:
    """When to look again at a recipe's allocations that are queued (or configuring): the
    earliest, per allocation, of ``submitted + 1.5 * age``. Unknown submit time: the resync."""
    due = [now + max(PENDING_MIN, (now - a.submitted) / 2) for a in allocs
           if a.live and not a.running and a.submitted is not None]
    return min(due, default=None)


def requeue_after(now: float, in_motion: bool, deadlines: Iterable[float | None]) -> float | None:
    waits = [max(0.0, t - now) for t in deadlines if t is not None]
    if in_motion:
        waits.append(ACTIVE_INTERVAL)
    return min(waits) if waits else None
