"""How often a unit is probed: a service's ``readiness.interval_seconds`` spaces its probes.

srtctl re-runs a service's probe every ``interval_seconds``; a probe that is costly for the
service (an HTTP handler doing real work) is asked no more often than that here either.
Between probes the unit keeps its last answer. Pure: the time is passed in.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

Key = tuple[str, str, int]


def due(interval: float, last_probed: float | None, now: float) -> bool:
    """Probe now? Always for a unit never probed in this life, or with no interval (0: every pass)."""
    return interval <= 0 or last_probed is None or now - last_probed >= interval


def split_due(units: Iterable[tuple[Key, float]], last: Mapping[Key, float],
              now: float) -> tuple[list[Key], list[Key]]:
    """(keys to probe now, keys that keep their last answer), from (key, interval) pairs."""
    now_, later = [], []
    for key, interval in units:
        (now_ if due(interval, last.get(key), now) else later).append(key)
    return now_, later
