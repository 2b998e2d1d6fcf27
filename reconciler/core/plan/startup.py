"""Measured startup: how long a role's own recent lives took from launch to Ready (pure).

The shell notes each life it saw from its launch to its Ready (state/<recipe>/startup.json, the
last ``KEEP`` per role, kept across reconciler restarts); this module keeps that history bounded and
sums it up. A role with no measured life yet is bounded by the recipe's health-check budget
(``max_attempts * interval_seconds``): the longest a life may load before it is judged failed, so
the only figure known to be an upper bound.

The autoscaler sizes ahead by the p90 (a forecast one startup ahead, the scale-down window, the
scale-from-zero hold): the median would leave every second wake-up short.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

KEEP = 20  # lives per role: recent enough to follow a change of engine or model, enough for a p90
MAX_SECONDS = 7 * 86400.0  # a figure beyond a week is not a startup (a clock jump, a bad file)


@dataclass(frozen=True)
class Life:
    unit: str  # e.g. agg_1
    launched: float  # when its launch was issued (epoch seconds)
    ready_after: float  # seconds from the launch to its first Ready
    routed_after: float | None = None  # seconds from the launch to its first request (None: not seen)


@dataclass(frozen=True)
class Startup:
    """A role's startup as the autoscaler uses it."""

    p50: float
    p90: float
    lives: int  # how many measured lives it comes from (0: the health-check budget)
    last: float | None = None  # the latest life's launch-to-Ready
    routed_p90: float | None = None  # launch to the first request, over the lives where it was seen

    @property
    def source(self) -> str:
        return f"measured over {self.lives} li{'fe' if self.lives == 1 else 'ves'}" if self.lives \
            else "health-check budget (no life measured yet)"

    def describe(self) -> str:
        """One line for events and ``describe``."""
        if not self.lives:
            return f"startup <= {self.p90:g}s ({self.source})"
        return f"startup p90 {self.p90:g}s, p50 {self.p50:g}s ({self.source})"


def percentile(values: Iterable[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in (0, 100]): a figure one of the lives really took."""
    xs = sorted(values)
    if not xs:
        raise ValueError("no values")
    return xs[max(0, math.ceil(q / 100 * len(xs)) - 1)]


def add(history: tuple[Life, ...], life: Life, keep: int = KEEP) -> tuple[Life, ...]:
    """The history with ``life`` noted once (a life is its unit and launch time), oldest dropped."""
    if any(x.unit == life.unit and x.launched == life.launched for x in history):
        return history
    if not 0 <= life.ready_after <= MAX_SECONDS:
        return history
    lives = sorted((*history, life), key=lambda x: x.launched)
    return tuple(lives[-keep:])


def routed(history: tuple[Life, ...], unit: str, launched: float, at: float) -> tuple[Life, ...]:
    """The life of ``unit`` launched at ``launched`` had its first request at ``at`` (noted once)."""
    return tuple(Life(x.unit, x.launched, x.ready_after, round(max(0.0, at - launched), 3))
                 if x.unit == unit and x.launched == launched and x.routed_after is None else x
                 for x in history)


def estimate(history: tuple[Life, ...], budget: float) -> Startup:
    """p50/p90 of the measured lives; none measured: the health-check budget (an upper bound)."""
    if not history:
        return Startup(budget, budget, 0)
    took = [x.ready_after for x in history]
    seen = [x.routed_after for x in history if x.routed_after is not None]
    return Startup(percentile(took, 50), percentile(took, 90), len(took), history[-1].ready_after,
                   percentile(seen, 90) if seen else None)


def to_json(history: Mapping[str, tuple[Life, ...]]) -> dict:
    return {"roles": {role: [{"unit": x.unit, "launched": x.launched, "readyAfter": x.ready_after,
                              "routedAfter": x.routed_after} for x in lives]
                      for role, lives in history.items()}}


def from_json(doc: object, keep: int = KEEP) -> dict[str, tuple[Life, ...]]:
    """The file read back; an entry that cannot be read is left out (never the whole file)."""
    roles = doc.get("roles") if isinstance(doc, dict) else None
    out: dict[str, tuple[Life, ...]] = {}
    for role, lives in (roles.items() if isinstance(roles, dict) else ()):
        got: tuple[Life, ...] = ()
        for x in lives if isinstance(lives, list) else ():
            try:
                r = x.get("routedAfter")
                life = Life(str(x["unit"]), float(x["launched"]), float(x["readyAfter"]),
                            None if r is None else float(r))
            except (AttributeError, KeyError, TypeError, ValueError):
                continue
            got = add(got, life, keep)
        if got:
            out[str(role)] = got
    return out
