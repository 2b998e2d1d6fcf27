"""Pending allocations explained: Slurm's reason in words, its expected start, and when to ask again. Pure.

Slurm says why a job waits in one word (squeue's Reason) and when it expects to start it
(``squeue --start``: the backfill scheduler's estimate, N/A when it has none). Users read the
word without the Slurm manual at hand: ``words`` says it in a sentence. The expected start is
asked at the pending-recheck pace (``requeue.pending_recheck``): again after half the time the
job has waited when last asked, at least ``requeue.PENDING_MIN`` — never every tick.
"""

from __future__ import annotations

from reconciler.core.plan.requeue import PENDING_MIN
from reconciler.pending_words import REASONS, PendingInfo, words  # noqa: F401 - the plan's names for them


def start_due(asked_at: float | None, submitted: float | None, now: float) -> bool:
    """Whether to ask Slurm for a pending job's expected start again: after half the time it had
    waited when last asked (at least PENDING_MIN); at once when never asked."""
    if asked_at is None:
        return True
    age = asked_at - submitted if submitted is not None else 0.0
    return now >= asked_at + max(PENDING_MIN, age / 2)


