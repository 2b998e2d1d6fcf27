"""core/plan/startup.py on hand-built lives: expectation tables (percentiles, the bounded history,
the health-check budget for a role with none, the file read back)."""

from __future__ import annotations

import pytest

from reconciler.core.plan.startup import KEEP, Life, Startup, add, estimate, from_json, percentile, routed, to_json


def lives(*took: float) -> tuple[Life, ...]:
    out: tuple[Life, ...] = ()
    for i, t in enumerate(took):
        out = add(out, Life(f"agg_{i % 3}", 1000.0 + 100 * i, t))
    return out


# (name, lives' launch-to-Ready, budget, expected p50, expected p90, lives counted)
ESTIMATE = [
    ("no life: the health-check budget bounds it", (), 1800.0, 1800.0, 1800.0, 0),
    ("one life is its own p50 and p90", (31.5,), 1800.0, 31.5, 31.5, 1),
    ("ten lives: p90 is the 9th of ten (nearest rank)", (30, 31, 32, 33, 34, 35, 36, 37, 38, 90), 1800.0, 34, 38, 10),
    ("a slow outlier among 20 is above the p90", (30,) * 19 + (300,), 1800.0, 30, 30, 20),
    ("two slow lives of 20 are not (the 18th of 20 is)", (30,) * 18 + (300, 310), 1800.0, 30, 30, 20),
    ("three slow lives of 20 are the p90's", (30,) * 17 + (300, 310, 320), 1800.0, 30, 300, 20),
]


@pytest.mark.parametrize("name, took, budget, p50, p90, n", ESTIMATE, ids=[r[0] for r in ESTIMATE])
def test_estimate(name, took, budget, p50, p90, n):
    s = estimate(lives(*took), budget)
    assert (s.p50, s.p90, s.lives) == (p50, p90, n)


def test_history_is_bounded_to_the_latest_lives_and_notes_a_life_once():
    h = lives(*range(1, KEEP + 6))
    assert len(h) == KEEP and h[0].ready_after == 6 and h[-1].ready_after == KEEP + 5
    assert add(h, h[-1]) is h  # the same life (unit, launch) is noted once
    assert add((), Life("agg_0", 1.0, -5.0)) == ()  # not a startup
    assert add((), Life("agg_0", 1.0, 1e9)) == ()


def test_first_request_is_noted_once_per_life():
    h = lives(30.0, 32.0)
    h = routed(h, "agg_1", 1100.0, 1140.5)
    h = routed(h, "agg_1", 1100.0, 1200.0)  # later requests change nothing
    assert [x.routed_after for x in h] == [None, 40.5]
    assert estimate(h, 600).routed_p90 == 40.5


def test_percentile_refuses_nothing():
    with pytest.raises(ValueError):
        percentile([], 90)


def test_describe_names_the_source():
    assert "budget" in Startup(600, 600, 0).describe() and "600" in Startup(600, 600, 0).describe()
    assert estimate(lives(30, 31), 600).describe() == "startup p90 31s, p50 30s (measured over 2 lives)"


def test_file_round_trip_and_bad_entries_left_out():
    h = {"agg": routed(lives(30.0, 31.0), "agg_0", 1000.0, 1033.0)}
    assert from_json(to_json(h)) == h
    doc = to_json(h)
    doc["roles"]["agg"].append({"unit": "agg_2", "launched": "x", "readyAfter": 3})
    doc["roles"]["decode"] = "nonsense"
    assert from_json(doc) == h
    assert from_json(None) == {} and from_json({"roles": []}) == {}
