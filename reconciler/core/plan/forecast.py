"""Predictive autoscaling (``autoscale.policy: predictive``): size a role for the load expected when
a worker started now would be Ready (pure).

Each decision keeps a sample of the role's load totals (queued, in flight, KV usage summed over its
workers) for the trend window. The trend is the least-squares line over that window; the forecast
is that line at the horizon plus the band the samples reached above it (their largest residual):
a gauge read once per decision swings around its trend, and the worker must be there for the
swings, not for the mean. The horizon is the role's measured startup p90 (``startup.py``) plus
``LEAD_INTERVALS`` decision intervals. A worker asked for at a decision is Ready the allocation's
start plus one startup later; the first decision whose forecast reaches the crossing comes up to one
interval after the moment it would have had to, so with two intervals the worker was Ready as little
as one interval less the allocation's start (2-3 s at 5 s) before the load: any forecast error beyond
that was late (CI at load 20: 1-3 s late). Three keep at least one interval more in hand. A rising
load so asks for the worker one startup before the per-worker target would be crossed, not when it is.

The windows follow the measured startup, not constants (Kubernetes HPA's stabilisation windows):

- trend: ``forecast_window_seconds``, else the horizon, at least three decisions' worth and at most
  ``MAX_WINDOW`` (the slope of the last startup's worth of load);
- scale-down: ``scale_down_after_seconds`` when the recipe sets it, else the horizon: the largest
  ask of the last startup is kept, so a return of the recent peak within one startup time finds the
  workers it needs (none could be added in time).

The forecast only ever adds to the reactive ask (a falling trend does not scale down early: the
scale-down window decides that). Latency targets are not extrapolated (a p90 has no total).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from reconciler.core.plan.startup import Startup
from reconciler.recipe.autoscale import AutoscaleConfig, RoleScale

MAX_WINDOW = 600.0  # a trend longer than ten minutes is not the one a startup has to catch up with
LEAD_INTERVALS = 3  # decision intervals added to the startup p90 for the horizon (see above)
MIN_SAMPLES = 3  # a line through two reads is any step extrapolated (idle -> one client read as a ramp)
# a trend is carried at most this many times as far ahead as the samples span: three reads 2 s
# apart at the first client after a quiet start are no evidence for 67 s ahead (the policy benchmark
# saw 1 -> max on the first client, docs/performance.md); the full horizon once they span a quarter of it
MAX_LEAD_RATIO = 4.0
# target -> the sample's field it is a per-worker share of (Sample = (at, waiting, in flight, kv))
TOTALS = {"waiting_per_worker": 1, "running_per_worker": 2, "kv_usage": 3}

Sample = tuple[float, float, float, float]


@dataclass(frozen=True)
class Windows:
    horizon: float  # how far ahead the forecast looks (startup p90 + LEAD_INTERVALS decisions)
    trend: float  # the slope's window
    down: float  # scale-down stabilisation: the largest ask of this long is kept

    def describe(self) -> str:
        return f"horizon {self.horizon:g}s, trend window {self.trend:g}s, scale-down window {self.down:g}s"


def windows(cfg: AutoscaleConfig, startup: Startup) -> Windows:
    """The windows for ``startup``; the recipe's own values win where it sets them."""
    horizon = startup.p90 + LEAD_INTERVALS * cfg.interval_seconds
    trend = cfg.forecast_window_seconds
    if trend is None:
        trend = min(MAX_WINDOW, max(3 * cfg.interval_seconds, horizon))
    down = cfg.scale_down_after_seconds if "scale_down_after_seconds" in cfg.model_fields_set else horizon
    # a health-check budget of hours (no life measured yet) is not extrapolated that far
    return Windows(round(min(horizon, MAX_WINDOW), 3), round(trend, 3), round(down, 3))


def line(points: list[tuple[float, float]]) -> tuple[float, float, float] | None:
    """The least-squares line: (slope per second, its value at the mean time, that mean time); None
    with fewer than two distinct times."""
    if len(points) < 2:
        return None
    n = len(points)
    mt = sum(t for t, _ in points) / n
    mv = sum(v for _, v in points) / n
    var = sum((t - mt) ** 2 for t, _ in points)
    if var <= 0:
        return None
    return sum((t - mt) * (v - mv) for t, v in points) / var, mv, mt


def slope(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope (per second); None with fewer than two distinct times."""
    fit = line(points)
    return fit[0] if fit is not None else None


def keep(samples: tuple[Sample, ...], new: Sample | None, now: float, window: float) -> tuple[Sample, ...]:
    """The samples within the trend window, with this decision's (None: no metrics this round)."""
    kept = tuple(s for s in samples if now - window <= s[0] < now)
    return kept + ((new,) if new is not None else ())


def ahead(samples: tuple[Sample, ...], field: int, horizon: float) -> tuple[float, float] | None:
    """(the total expected ``horizon`` seconds after the latest sample — no further than
    ``MAX_LEAD_RATIO`` times the samples' span — and the slope); None without a trend yet. The line there, plus the largest amount a sample rose above the line (never less
    than the latest sample's own trend ahead); a falling trend forecasts no less than zero."""
    pts = [(s[0], s[field]) for s in samples]
    fit = line(pts)
    if fit is None:
        return None
    k, mv, mt = fit
    band = max(0.0, *(v - (mv + k * (t - mt)) for t, v in pts))
    lead = min(horizon, MAX_LEAD_RATIO * (pts[-1][0] - pts[0][0]))
    return max(0.0, mv + k * (pts[-1][0] + lead - mt) + band), k


def predict(rs: RoleScale, ready: int, samples: tuple[Sample, ...], current: int, tolerance: float,
            win: Windows) -> tuple[int | None, str, dict[str, float]]:
    """(the count the forecast asks for, why, its inputs); None without a trend (``MIN_SAMPLES``) or a
    Ready worker. As the reactive rule: a ratio within ``tolerance`` of 1 keeps the count, the
    largest ask wins."""
    if ready <= 0 or len(samples) < MIN_SAMPLES:
        return None, "", {}
    best: tuple[int, str] | None = None
    inputs: dict[str, float] = {}
    for name, target in rs.target.model_dump().items():
        if target is None or name not in TOTALS:
            continue
        got = ahead(samples, TOTALS[name], win.horizon)
        if got is None:
            continue
        total, k = got
        per = total / ready
        inputs[f"forecast_{name}"] = round(per, 3)
        inputs[f"trend_{name}_per_s"] = round(k, 4)
        ratio = per / target
        ask = current if abs(ratio - 1) <= tolerance else math.ceil(total / target)
        why = (f"forecast {name} {per:.3g} against {target:g} on {ready} ready in {win.horizon:g}s "
               f"(trend {k:+.3g}/s over {len(samples)} samples)")
        if best is None or ask > best[0]:
            best = (ask, why)
    if best is None:
        return None, "", inputs
    return best[0], best[1], inputs
