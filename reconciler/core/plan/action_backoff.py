"""compute_action_backoff: a recipe whose actions failed (sbatch refused, scancel timed out)
waits before it is acted on again — 2 s, doubling, at most 300 s — so one broken recipe
neither floods Slurm nor delays the others. A success clears the record (the shell's job)."""

from __future__ import annotations

from reconciler.world import ActionFailures

FIRST_DELAY = 2.0
MAX_DELAY = 300.0


def action_delay(failures: int) -> float:
    return min(FIRST_DELAY * (2 ** min(max(failures - 1, 0), 30)), MAX_DELAY)


def compute_action_backoff(f: ActionFailures | None, now: float) -> float | None:
    """When the recipe may be acted on again, or None when it may be now."""
    if f is None or f.count <= 0:
        return None
    retry_at = f.last_at + action_delay(f.count)
    return retry_at if now < retry_at else None
