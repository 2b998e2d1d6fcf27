"""requeue_after: the earliest moment anything in the plan would change on its own.

While something is in motion (an action was planned, a worker is starting, an
allocation is pending, a step is shutting down) the loop looks again after
``ACTIVE_INTERVAL``; otherwise it sleeps until the next deadline (a backoff ends, a
startup grace runs out, a backoff counter resets, an action may be retried) — or until
a file event or the resync, whichever comes first. None: nothing is scheduled.
"""

from __future__ import annotations

from collections.abc import Iterable

ACTIVE_INTERVAL = 0.5  # seconds between ticks while something is converging


def requeue_after(now: float, in_motion: bool, deadlines: Iterable[float | None]) -> float | None:
    waits = [max(0.0, t - now) for t in deadlines if t is not None]
    if in_motion:
        waits.append(ACTIVE_INTERVAL)
    return min(waits) if waits else None
