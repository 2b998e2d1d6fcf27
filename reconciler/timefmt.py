"""Timestamps as people and status files read them."""

from __future__ import annotations

import time


def iso(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def slurm_seconds(text: str | None) -> float | None:
    """A Slurm duration in seconds (a time limit as sbatch reads it, or squeue's TimeLeft):
    ``MM``, ``MM:SS``, ``HH:MM:SS``, ``D-HH``, ``D-HH:MM``, ``D-HH:MM:SS``; None for
    UNLIMITED / INFINITE / NOT_SET / INVALID / nothing."""
    if not text:
        return None
    text = text.strip()
    days, _, rest = text.rpartition("-")
    parts = rest.split(":")
    try:
        nums = [int(p) for p in parts]
        d = int(days) if days else 0
    except ValueError:
        return None
    if days:
        h, m, s = (nums + [0, 0])[:3]
    elif len(nums) == 3:
        h, m, s = nums
    elif len(nums) == 2:
        h, (m, s) = 0, nums
    elif len(nums) == 1:
        h, m, s = 0, nums[0], 0
    else:
        return None
    return float(((d * 24 + h) * 60 + m) * 60 + s)


def slurm_duration(sec: float) -> str:
    """Seconds as squeue writes a TimeLeft: ``M:SS``, ``H:MM:SS``, ``D-HH:MM:SS``."""
    sec = max(0, int(sec))
    d, rest = divmod(sec, 86400)
    h, rest = divmod(rest, 3600)
    m, s = divmod(rest, 60)
    if d:
        return f"{d}-{h:02d}:{m:02d}:{s:02d}"
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def span(sec: float) -> str:
    """A wait in words a person reads at a glance: 45s, 14m, 2h05m."""
    sec = max(0, int(sec))
    if sec < 120:
        return f"{sec}s"
    if sec < 7200:
        return f"{sec // 60}m"
    return f"{sec // 3600}h{(sec % 3600) // 60:02d}m"
