"""What a deployment scaled to zero tells the requests it holds: why they wait, and for how long.

After each autoscale decision of a recipe that scales to zero: a wake-up (a role going from 0 to
more) starts a clock; once every autoscaled role has a Ready worker again, how long that took is
kept (``autoscale.json``'s ``wake``) as the next wake-up's expected duration. The gateway's holder
reads ``wake.json`` (its expected ready time and why) when it answers a request 503 after its hold
timeout: Slurm's expected start of a pending allocation when there is one, else the last wake-up's
duration from this one's start (none timed yet: the roles' measured startup p90). The holder
holds a request at least that measured startup (``hold_at_least``), whatever the recipe's hold.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from reconciler.shell.gateway import holder_supervisor


def track(prev: object, decisions: Mapping, facts: Mapping, now: float) -> dict:
    """The wake-up clock: {"since": when the last wake-up began (None: not waking), "took": seconds the
    last finished one took (None: none seen yet)}."""
    w = dict(prev) if isinstance(prev, dict) else {}
    since, took = w.get("since"), w.get("took")
    since = since if isinstance(since, (int, float)) else None
    took = took if isinstance(took, (int, float)) else None
    if any(dec.scaled > 0 and dec.memory.target == dec.scaled for dec in decisions.values()):
        since = now  # 0 -> n: a wake-up starts
    elif all(dec.memory.target == 0 for dec in decisions.values()):
        since = None  # at zero (or back to it before it was ever Ready)
    elif since is not None and all(f.ready > 0 for f in facts.values()):
        since, took = None, round(now - since, 3)
    return {"since": since, "took": took}


def tell_holder(root, name: str, wake: dict, d, o, now: float, at_zero: bool = False,
                startup: float | None = None) -> None:
    """Write the holder's ``wake.json`` (only when it changes). ``at_zero``: every role's target is 0
    (its last worker may still be draining: the deployment is going to zero all the same).
    ``startup``: the slowest role's measured startup p90, the expected wait before any wake-up was
    timed (None: no life measured)."""
    since, took = wake.get("since"), wake.get("took")
    took = took if took is not None else startup
    pending = [o.pending[a.job_id] for a in o.allocs_of(name) if a.job_id in o.pending]
    starts = [i.start for i in pending if i.start is not None]
    if since is None and at_zero:
        why = "scaled to zero: a held request brings a worker back"
        expected = now + took if took is not None else None
    elif since is None:  # serving: nothing held waits for a wake-up, and no refusal says it does
        (root / name / "gateway" / "wake.json").unlink(missing_ok=True)
        return
    else:
        why = "; ".join(i.explain(now) for i in pending) or "a worker is starting"
        expected = since + took if took is not None else None
        if starts:
            expected = max(expected or 0.0, max(starts))
    prefix = root / name / "gateway"
    text_now = {"expectedReadyAt": round(expected, 3) if expected is not None else None, "why": why}
    try:
        if json.loads((prefix / "wake.json").read_text()) == text_now:
            return
    except (OSError, ValueError):
        pass
    holder_supervisor.write_wake(prefix, text_now["expectedReadyAt"], why)


MAX_HOLD = 3600.0  # the holder refuses a longer hold (gateway/holder.py)


def measured_startup(root, name: str) -> float | None:
    """The slowest role's measured startup p90 from state/<recipe>/startup.json (None: no life
    measured yet; the health-check budget is a bound, not a wait to hold requests for)."""
    try:
        summary = json.loads((root / name / "startup.json").read_text()).get("summary") or {}
        p90s = [float(s["p90"]) for s in summary.values() if isinstance(s, dict) and s.get("lives")]
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None
    return max(p90s) if p90s else None


def hold_at_least(hold: float | None, startup: float | None) -> float | None:
    """A scale-to-zero hold of at least the measured startup (a request held for less than a wake-up
    takes could only be refused), within the holder's bound."""
    if hold is None or startup is None:
        return hold
    return max(hold, min(MAX_HOLD, round(startup, 3)))
