"""readiness.interval_seconds: a service is probed no more often than its interval."""

from __future__ import annotations

import pytest

from reconciler.core.probe_pace import due, split_due


@pytest.mark.parametrize("what, interval, last, now, want", [
    ("never probed in this life: probe at once", 30.0, None, 100.0, True),
    ("no interval: every pass", 0.0, 99.9, 100.0, True),
    ("inside the interval: keep the last answer", 5.0, 97.0, 100.0, False),
    ("the interval has passed exactly", 5.0, 95.0, 100.0, True),
    ("long after", 2.0, 10.0, 100.0, True),
    ("the clock went back (a restored state): wait, never probe twice as fast", 5.0, 101.0, 100.0, False),
])
def test_due(what, interval, last, now, want):
    assert due(interval, last, now) is want, what


def test_split_due_keeps_order_and_splits_by_interval():
    a, b, c = ("r", "svc-a", 0), ("r", "svc-b", 0), ("r", "agg", 0)
    now, later = split_due([(a, 10.0), (b, 10.0), (c, 0.0)], {a: 95.0, b: 85.0, c: 99.0}, 100.0)
    assert (now, later) == ([b, c], [a])
