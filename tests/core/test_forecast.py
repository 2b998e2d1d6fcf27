"""core/plan/forecast.py and the predictive policy of compute_autoscale: expectation tables (the
trend, the windows derived from the measured startup, the forecast's ask, scale-down held for a
startup)."""

from __future__ import annotations

import pytest

from reconciler.core.plan.autoscale import Load, RoleFacts, decide, from_json, start, to_json
from reconciler.core.plan.forecast import Windows, ahead, keep, predict, slope, windows
from reconciler.core.plan.startup import Startup
from reconciler.recipe.autoscale import AutoscaleConfig


def cfg(**kw) -> AutoscaleConfig:
    return AutoscaleConfig.model_validate({"roles": {"agg": {"min": 1, "max": 4, "target": {"running_per_worker": 4}}},
                                           "policy": "predictive", "interval_seconds": 5, **kw})


MEASURED = Startup(30.0, 30.0, 5)

# (name, points, expected slope)
SLOPE = [
    ("flat", [(0, 2), (5, 2), (10, 2)], 0.0),
    ("a line", [(0, 1), (5, 2), (10, 3)], 0.2),
    ("falling", [(0, 6), (10, 4)], -0.2),
    ("noisy rising: the least-squares fit", [(0, 1), (5, 3), (10, 2), (15, 4)], 0.16),
    ("one point: no trend", [(0, 1)], None),
    ("one time twice: no trend", [(3, 1), (3, 2)], None),
]


@pytest.mark.parametrize("name, points, want", SLOPE, ids=[r[0] for r in SLOPE])
def test_slope(name, points, want):
    got = slope(points)
    assert (got is None and want is None) or got == pytest.approx(want)


# (name, config keys, startup, expected windows)
WINDOWS = [
    ("measured 30 s: horizon = p90 + three decisions; trend and scale-down follow it", {}, MEASURED,
     Windows(45.0, 45.0, 45.0)),
    ("a fast engine: the trend keeps three decisions' worth", {}, Startup(1, 1, 3), Windows(16.0, 16.0, 16.0)),
    ("no life yet: the budget, the horizon and trend capped at ten minutes", {}, Startup(1800, 1800, 0),
     Windows(600.0, 600.0, 1815.0)),
    ("the recipe's scale-down window wins", {"scale_down_after_seconds": 120}, MEASURED, Windows(45.0, 45.0, 120.0)),
    ("the recipe's trend window wins", {"forecast_window_seconds": 20}, MEASURED, Windows(45.0, 20.0, 45.0)),
]


@pytest.mark.parametrize("name, keys, startup, want", WINDOWS, ids=[r[0] for r in WINDOWS])
def test_windows(name, keys, startup, want):
    assert windows(cfg(**keys), startup) == want


def test_samples_kept_within_the_trend_window():
    s = ((0.0, 0, 1, 0), (30.0, 0, 2, 0), (50.0, 0, 3, 0))
    assert keep(s, (60.0, 0, 4, 0), 60.0, 40.0) == s[1:] + ((60.0, 0, 4, 0),)
    assert keep(s, None, 60.0, 40.0) == s[1:]


def test_a_short_span_is_carried_at_most_four_times_its_length():
    pts = ((0.0, 0, 0.0, 0), (1.0, 0, 1.0, 0), (2.0, 0, 2.0, 0))  # 1/s over 2 s
    assert ahead(pts, 2, 40)[0] == pytest.approx(2.0 + 8.0)  # 8 s ahead, not 40
    wide = tuple((10.0 * i, 0, float(i), 0) for i in range(3))  # 0.1/s over 20 s: 80 s >= 40
    assert ahead(wide, 2, 40)[0] == pytest.approx(2.0 + 4.0)


def test_ahead_never_below_zero():
    assert ahead(((0, 0, 4, 0), (10, 0, 0, 0)), 2, 40) == (0.0, -0.4)


# (name, in-flight samples every 5 s, horizon, expected forecast)
AHEAD = [
    ("a line: its value at the horizon", (1, 2, 3), 10, 5.0),
    ("flat: the level", (3, 3, 3), 40, 3.0),
    # slope 0.08: the line at 60 s is 8, and the sample at 5 s rose 2.4 above the line
    ("noise: the line at the horizon plus the highest swing above it", (2, 6, 2, 6, 4), 40, 10.4),
    # the e2e's samples (one client more every 15 s): 7 + 0.062 * 40 = 9.5 from the latest alone
    ("a noisy rise: never below the latest sample's own trend ahead", (4, 6, 5, 4, 6, 6, 6, 7), 40, 10.333),
]


@pytest.mark.parametrize("name, values, horizon, want", AHEAD, ids=[r[0] for r in AHEAD])
def test_ahead(name, values, horizon, want):
    got = ahead(tuple((5.0 * i, 0, float(v), 0) for i, v in enumerate(values)), 2, horizon)
    assert got is not None and got[0] == pytest.approx(want, abs=1e-3), got
    k = got[1]
    assert got[0] >= values[-1] + k * horizon - 1e-9


RISING = ((0.0, 0, 1.0, 0), (5.0, 0, 1.5, 0), (10.0, 0, 2.0, 0))  # +0.1 in flight per second
# (name, samples, ready, current, expected ask)
PREDICT = [
    ("rising 0.1/s: 2 + 4 in 40 s is 6 in flight, two workers of 4", RISING, 1, 1, 2),
    ("flat at 2 on one worker: no more", ((0.0, 0, 2, 0), (5.0, 0, 2, 0), (10.0, 0, 2, 0)), 1, 1, 1),
    ("within tolerance of the target keeps the count", ((0.0, 0, 4.2, 0), (5.0, 0, 4.2, 0), (10.0, 0, 4.2, 0)), 1, 1, 1),
    ("steep: 5 + 0.3/s for 40 s is 17 in flight, five workers' worth",
     ((0.0, 0, 2.0, 0), (5.0, 0, 3.5, 0), (10.0, 0, 5.0, 0)), 1, 1, 5),
    ("a noisy load: sized for its swings above the line (10.4 in 40 s), not its mean (8)",
     ((0.0, 0, 2.0, 0), (5.0, 0, 6.0, 0), (10.0, 0, 2.0, 0), (15.0, 0, 6.0, 0), (20.0, 0, 4.0, 0)), 1, 1, 3),
    ("two samples: not yet a trend (a step is no ramp), no ask", RISING[:2], 1, 1, None),
    # the policy benchmark's first client after a quiet start: 3 reads 2 s apart rising 0.24/s are
    # carried 16 s ahead (4 x their 4 s), not the 40 s horizon: 1.5 + 3.8 in flight, two workers, not three
    ("three reads 2 s apart: carried 4x their span, not the whole horizon",
     ((0.0, 0, 1.0, 0), (2.0, 0, 1.5, 0), (4.0, 0, 1.96, 0)), 1, 1, 2),
    ("no ready worker: no ask", RISING, 0, 1, None),
]


@pytest.mark.parametrize("name, samples, ready, current, want", PREDICT, ids=[r[0] for r in PREDICT])
def test_predict(name, samples, ready, current, want):
    c = cfg()
    ask, why, inputs = predict(dict(c.roles.items())["agg"], ready, samples, current, c.tolerance,
                               windows(c, MEASURED))
    assert ask == want, why
    if want is not None:
        assert "forecast running_per_worker" in why and "in 45s" in why and "forecast_running_per_worker" in inputs


def inflight(n: float) -> RoleFacts:
    return RoleFacts(1, Load(1, 0.0, n, 0.0, None, None, 5.0))


def run(c, steps, startup=MEASURED, workers=1, t0=1000.0):
    rs = dict(c.roles.items())["agg"]
    m, now, out = start(workers, t0), t0, []
    for dt, facts in steps:
        now += dt
        d = decide(c, rs, facts, m, now, startup=startup)
        m = d.memory
        out.append((m.target, d.reason))
    return out, m


def test_a_rising_load_scales_up_before_the_target_is_crossed_reactive_does_not():
    ramp = [(5, inflight(1 + 0.5 * i)) for i in range(5)]  # 1 .. 3 in flight on one worker: below 4
    pred, _ = run(cfg(), ramp)
    # the third read makes a trend (two are a step): 2 in flight + 0.1/s for 40 s is 6 > 4.4
    assert [t for t, _ in pred] == [1, 1, 2, 2, 2]
    assert "no trend yet" in pred[1][1]
    assert "forecast running_per_worker" in pred[2][1] and "startup p90 30s" in pred[2][1], pred[2][1]
    react, _ = run(cfg(policy="reactive"), ramp)
    assert [t for t, _ in react] == [1] * 5


def test_scale_down_holds_the_peak_for_one_startup_horizon_not_the_constant():
    c = cfg()
    steps = [(5, inflight(8.0)), (5, inflight(8.0))] + [(5, inflight(0.5))] * 12
    out, _ = run(c, steps, workers=2)
    targets = [t for t, _ in out]
    # the peak's last ask (t=10) holds 2 until it is out of the 45 s window: the decision at t=60
    assert targets[:11] == [2] * 11 and targets[11] == 1, targets
    assert "2 -> 1" in out[11][1] and "scale-down window 45s" in out[11][1], out[11][1]
    # the reactive default (300 s) would hold it the whole time
    react, _ = run(cfg(policy="reactive"), steps, workers=2)
    assert [t for t, _ in react] == [2] * 14


def test_no_history_uses_the_budget_for_the_scale_down_window():
    steps = [(5, inflight(8.0))] + [(5, inflight(0.5))] * 12
    out, _ = run(cfg(), steps, startup=Startup(600, 600, 0), workers=2)
    assert all(t == 2 for t, _ in out)
    assert "health-check budget" in out[-1][1] or all("->" not in r for _, r in out)


def test_samples_survive_the_file():
    _, m = run(cfg(), [(5, inflight(1 + i)) for i in range(3)])
    rs = dict(cfg().roles.items())["agg"]
    assert m.samples and from_json(to_json(m), rs) == m


def test_forecast_window_needs_the_predictive_policy():
    with pytest.raises(ValueError, match="needs policy: predictive"):
        cfg(policy="reactive", forecast_window_seconds=30)
