"""compute_autoscale: how many workers each autoscaled role should have. Pure: facts in, counts out.

Kubernetes HPA semantics, per role (prefill and decode are sized apart, each on its own workers'
metrics):

1. **Recommend.** Each target gives ``ceil(ready * value / target)`` (the per-worker average over
   the workers that answered); a ratio within ``tolerance`` of 1 keeps the count. The largest ask
   wins. Latency targets (TTFT/ITL p90) only ask for more: a low latency is no spare capacity.
   No metrics (no worker answered, none Ready) changes nothing. The ask is clamped to [min, max];
   below 1 only after ``scale_to_zero_after_seconds`` without a request (opt-in, min 0), and then
   straight to 0 (the idle period is that step's window). Requests held at the gateway
   (``RoleFacts.demand``) bring a role at zero back to 1 at once (its floor rises too). A role
   whose workers are all still loading (``RoleFacts.loading``: a wake-up, a relaunch) is not idle:
   a real engine loads for minutes, and releasing it before its first Ready would make every
   wake-up pay the load again, and never end when the load outlasts the idle period.
2. **Stabilise.** Scale up to the smallest ask of the last ``scale_up_after_seconds``; down to the
   largest ask of the last ``scale_down_after_seconds`` (HPA ``stabilizationWindowSeconds``).
3. **Rate-limit.** At most max(``workers``, ``percent`` % of the count at the period's start) added
   (removed) per ``period_seconds`` (HPA ``policies`` with ``selectPolicy: Max``).
4. **Drain.** A lower count does not stop anyone at once: the victims (the highest indices) leave
   the routers first (``draining``); the built count follows once they have been out for
   ``drain_seconds`` and have nothing running (at most ``drain_timeout_seconds``). Load coming
   back during the drain puts them back in the routers.

With ``policy: predictive`` (``core/plan/forecast.py``) step 1 also asks for the load forecast one
measured startup ahead (the larger ask wins), and step 2's scale-down window is derived from that
startup unless the recipe sets it; every reason then names the forecast, the startup and the windows.

The memory between decisions (``RoleMemory``) is kept by the shell in state/<recipe>/autoscale.json.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from reconciler.core.plan.forecast import Sample, Windows, keep, predict, windows
from reconciler.core.plan.startup import Startup
from reconciler.recipe.autoscale import AutoscaleConfig, Limit, RoleScale

LOAD_TARGETS = ("waiting_per_worker", "running_per_worker", "kv_usage")
LATENCY_TARGETS = ("ttft_p90_ms", "itl_p90_ms")


@dataclass(frozen=True)
class Load:
    """One scrape of a role's serving workers, summed over the ``workers`` that answered."""

    workers: int
    waiting: float = 0.0
    running: float = 0.0
    kv_usage: float = 0.0
    ttft_p90_ms: float | None = None  # over the interval since the previous scrape (None: no request)
    itl_p90_ms: float | None = None
    requests: float = 0.0  # requests finished since the previous scrape

    @property
    def busy(self) -> bool:
        return self.waiting > 0 or self.running > 0 or self.requests > 0

    def per_worker(self, target: str) -> float | None:
        if target in LATENCY_TARGETS:
            return getattr(self, target)
        total = {"waiting_per_worker": self.waiting, "running_per_worker": self.running + self.waiting,
                 "kv_usage": self.kv_usage}[target]
        return total / self.workers if self.workers else None


@dataclass(frozen=True)
class RoleFacts:
    ready: int  # Ready workers of the role now
    load: Load | None  # None: no worker answered its metrics
    victims_busy: bool = False  # a draining victim still runs or queues requests
    demand: bool = False  # requests came to the frontend for this role (what brings a role back from zero)
    # a worker of the role was launched and is loading within its startup budget, never Ready yet
    loading: bool = False


@dataclass(frozen=True)
class RoleMemory:
    """What a role's decisions keep between ticks."""

    built: int  # the count the desired state is built with (victims included while they drain)
    target: int  # the count decided
    asks: tuple[tuple[float, int], ...] = ()  # (when, recommendation) within the stabilisation windows
    changes: tuple[tuple[float, int], ...] = ()  # (when, +added / -removed) within the rate-limit periods
    drain_since: float | None = None  # victims left the routers at
    last_busy: float | None = None  # a request was last seen at (scale to zero)
    samples: tuple[Sample, ...] = ()  # (when, waiting, in flight, kv) within the trend window (predictive)

    @property
    def draining(self) -> range:
        """Indices out of the routers, waiting to be stopped."""
        return range(self.target, self.built) if self.drain_since is not None else range(0)


@dataclass(frozen=True)
class RoleDecision:
    memory: RoleMemory
    ask: int | None  # this round's recommendation (None: no metrics)
    reason: str  # why, in words, with the inputs
    inputs: Mapping[str, float] = field(default_factory=dict)
    scaled: int = 0  # change of target this round (+ up, - down)


def start(workers: int, now: float) -> RoleMemory:
    """A role not decided on before: the file's ``workers:`` is the starting count."""
    return RoleMemory(built=workers, target=workers, last_busy=now)


def compute_autoscale(cfg: AutoscaleConfig, facts: Mapping[str, RoleFacts], memory: Mapping[str, RoleMemory],
                      now: float, startups: Mapping[str, Startup] | None = None) -> dict[str, RoleDecision]:
    """One decision per autoscaled role. ``memory`` holds every role (``start`` for a new one).
    Scale to zero is the whole deployment's: a role is idle for it only while every role is (a
    prefill idle beside a decode still busy keeps its worker, and the head node with it)."""
    got = {role: facts.get(role, RoleFacts(0, None)) for role, _ in cfg.roles.items()}
    seen = [t for role, f in got.items() if (t := _busy_at(f, memory[role], now)) is not None]
    return {role: decide(cfg, rs, got[role], memory[role], now, max(seen, default=None),
                         (startups or {}).get(role))
            for role, rs in cfg.roles.items()}


def _busy_at(f: RoleFacts, m: RoleMemory, now: float) -> float | None:
    # no Ready worker and one loading: the idle clock starts at its Ready (or once it is judged failed)
    waking = f.loading and f.ready == 0
    return now if (f.load is not None and f.load.busy) or f.demand or waking else m.last_busy


def decide(cfg: AutoscaleConfig, rs: RoleScale, f: RoleFacts, m: RoleMemory, now: float,
           anyone_busy: float | None = None, startup: Startup | None = None) -> RoleDecision:
    """``anyone_busy``: when any role of the deployment last saw a request (scale to zero).
    ``startup``: the role's measured startup (the predictive policy sizes one of it ahead)."""
    last_busy = _busy_at(f, m, now)
    seen = max((t for t in (last_busy, anyone_busy) if t is not None), default=None)
    floor = _floor(cfg, rs, seen, now)
    ask, reason, inputs = recommend(rs, f, m.target, cfg.tolerance)
    win = windows(cfg, startup) if cfg.policy == "predictive" and startup is not None else None
    samples = m.samples
    if win is not None:
        ask, reason, inputs, samples = _predicted(cfg, rs, f, m, now, win, (ask, reason, inputs))
        reason += f"; {startup.describe()}; {win.describe()}"  # type: ignore[union-attr]
    if f.demand and m.target == 0:
        ask, reason = max(1, ask or 0), WOKEN
    if floor == 0 and m.target > 0:
        return _to_zero(cfg, m, f, now, last_busy, seen, inputs)
    down_window = win.down if win is not None else cfg.scale_down_after_seconds
    window = max(cfg.scale_up_after_seconds, down_window)
    asks = tuple((t, a) for t, a in m.asks if now - t <= window)
    if ask is not None:
        ask = min(rs.max, max(floor, ask))
        asks += ((now, ask),)
    target = _stabilised(cfg, asks, m.target, now, down_window) if ask is not None else m.target
    if target == m.target and m.target < floor:
        target = floor  # the floor rose (a request after scale to zero) or the spec's min did
    if target > rs.max:
        target = rs.max  # the spec's max was lowered
    wanted = target
    target = _limited(cfg, m, target, now)
    if target != m.target:
        why = reason if ask is not None else f"held within [{floor}, {rs.max}]"
        if target != wanted:
            why += f" (rate-limited: {wanted} asked)"
        reason = f"{m.target} -> {target}: {why}"
    changes = tuple((t, d) for t, d in m.changes
                    if now - t <= max(cfg.scale_up_limit.period_seconds, cfg.scale_down_limit.period_seconds))
    if target != m.target:
        changes += ((now, target - m.target),)
    mem = RoleMemory(m.built, target, asks, changes, m.drain_since, last_busy, samples)
    return RoleDecision(_drain(cfg, mem, f, now, m.target), ask, reason, inputs, target - m.target)


def _predicted(cfg: AutoscaleConfig, rs: RoleScale, f: RoleFacts, m: RoleMemory, now: float, win: Windows,
               reactive: tuple[int | None, str, dict]) -> tuple[int | None, str, dict, tuple[Sample, ...]]:
    """The reactive ask, raised to the forecast's when that is larger; this round's sample kept."""
    ask, reason, inputs = reactive
    load = f.load
    new = (now, load.waiting, load.running + load.waiting, load.kv_usage) if load is not None else None
    samples = keep(m.samples, new, now, win.trend)
    ready = min(f.ready, load.workers) or f.ready if load is not None else 0
    fask, fwhy, finputs = predict(rs, ready, samples, m.target, cfg.tolerance, win)
    inputs = {**inputs, **finputs, "horizon_s": win.horizon, "scale_down_window_s": win.down}
    if fask is not None and ask is not None and fask > ask:
        return fask, fwhy, inputs, samples
    if fwhy:
        reason += f" (forecast asks {fask}: {fwhy})"
    else:
        reason += " (no trend yet: the reactive ask)"
    return ask, reason, inputs, samples


WOKEN = "requests wait at the gateway for a deployment scaled to zero (wake-up)"


def _to_zero(cfg: AutoscaleConfig, m: RoleMemory, f: RoleFacts, now: float, last_busy: float | None,
             seen: float | None, inputs: dict) -> RoleDecision:
    """Idle for the whole scale_to_zero_after_seconds: every worker goes at once. The idle period is
    this decision's own stabilisation window, so neither the scale-down window nor its rate limit
    applies (they would keep a worker of an idle deployment for no request). The victims drain first."""
    idle = now - seen if seen is not None else 0.0
    reason = (f"{m.target} -> 0: no request for {idle:.0f}s "
              f"(scale_to_zero_after_seconds: {cfg.scale_to_zero_after_seconds:g}); scaled to zero")
    mem = RoleMemory(m.built, 0, ((now, 0),), m.changes + ((now, -m.target),), m.drain_since, last_busy)
    return RoleDecision(_drain(cfg, mem, f, now, m.target), 0, reason, inputs, -m.target)


def recommend(rs: RoleScale, f: RoleFacts, current: int, tolerance: float) -> tuple[int | None, str, dict]:
    """(the count the metrics ask for, why, the inputs); None when there are no metrics."""
    load = f.load
    if load is None or load.workers == 0 or f.ready == 0:
        return None, "no metrics (no Ready worker answered)", {}
    ready = min(f.ready, load.workers) or f.ready
    inputs: dict[str, float] = {"ready": f.ready, "answered": load.workers, "waiting": load.waiting,
                                "running": load.running}
    best: tuple[int, str] | None = None
    for name, target in rs.target.model_dump().items():
        value = load.per_worker(name) if target is not None else None
        if target is None or value is None:
            continue
        inputs[name] = round(value, 3)
        ratio = value / target
        if abs(ratio - 1) <= tolerance:
            ask = current  # close enough: HPA's tolerance keeps the count
        elif name in LATENCY_TARGETS and ratio < 1:
            ask = current if load.busy else 0  # fast says nothing of spare capacity; idle does
        else:
            ask = math.ceil(ready * ratio)
        why = f"{name} {value:.3g} against {target:g} on {ready} ready"
        if best is None or ask > best[0]:
            best = (ask, why)
    if best is None:  # latency targets only, and no request in the interval: nothing measured
        return (current if load.busy else 0), ("busy, no latency measured" if load.busy else "idle"), inputs
    return best[0], best[1], inputs


def _floor(cfg: AutoscaleConfig, rs: RoleScale, last_busy: float | None, now: float) -> int:
    """min; a role with min 0 keeps one worker until it has been idle for scale_to_zero_after_seconds."""
    if rs.min > 0:
        return rs.min
    idle_for = cfg.scale_to_zero_after_seconds
    if idle_for is None or last_busy is None or now - last_busy < idle_for:
        return 1
    return 0


def _stabilised(cfg: AutoscaleConfig, asks: tuple[tuple[float, int], ...], current: int, now: float,
                down_window: float) -> int:
    up = min((a for t, a in asks if now - t <= cfg.scale_up_after_seconds), default=current)
    down = max((a for t, a in asks if now - t <= down_window), default=current)
    if up > current:
        return up
    if down < current:
        return down
    return current


def _limited(cfg: AutoscaleConfig, m: RoleMemory, target: int, now: float) -> int:
    """HPA's rate limit: against the count at the start of each limit's period."""
    if target > m.target:
        lim = cfg.scale_up_limit
        added = sum(d for t, d in m.changes if d > 0 and now - t <= lim.period_seconds)
        removed = -sum(d for t, d in m.changes if d < 0 and now - t <= lim.period_seconds)
        start = m.target - added + removed
        return min(target, max(m.target, _up_limit(lim, start)))
    if target < m.target:
        lim = cfg.scale_down_limit
        removed = -sum(d for t, d in m.changes if d < 0 and now - t <= lim.period_seconds)
        start = m.target + removed
        return max(target, min(m.target, _down_limit(lim, start)))
    return target


def _up_limit(lim: Limit, start: int) -> int:
    return max(start + lim.workers, math.ceil(start * (1 + lim.percent / 100)))


def _down_limit(lim: Limit, start: int) -> int:
    return max(0, min(start - lim.workers, math.ceil(start * (1 - lim.percent / 100))))


def _drain(cfg: AutoscaleConfig, m: RoleMemory, f: RoleFacts, now: float, before: int | None = None) -> RoleMemory:
    """The built count: up at once; down once the victims are out of the routers and done.
    ``before``: the target until this decision; a lower one during a drain adds victims that are
    still routed, so the drain starts over for them (they leave the routers from this tick on)."""
    if m.target >= m.built:
        return replace(m, built=m.target, drain_since=None)  # up, or load came back during a drain
    if m.drain_since is None or (before is not None and m.target < before):
        return replace(m, drain_since=now)  # the victims leave the routers from this tick on
    out_for = now - m.drain_since
    if out_for >= cfg.drain_timeout_seconds or (out_for >= cfg.drain_seconds and not f.victims_busy):
        return replace(m, built=m.target, drain_since=None)
    return m


def to_json(m: RoleMemory) -> dict:
    return {"built": m.built, "target": m.target, "asks": [list(a) for a in m.asks],
            "changes": [list(c) for c in m.changes], "drain_since": m.drain_since, "last_busy": m.last_busy,
            "samples": [list(x) for x in m.samples]}


def from_json(d: object, rs: RoleScale) -> RoleMemory | None:
    """A role's memory read back; None when it cannot be read (the role starts afresh). Counts are
    clamped to the spec's [min, max] as it is now (an edit may have moved them)."""
    try:
        assert isinstance(d, dict)
        built, target = int(d["built"]), int(d["target"])
        asks = tuple((float(t), int(a)) for t, a in d.get("asks", []))
        changes = tuple((float(t), int(c)) for t, c in d.get("changes", []))
        drain = None if d.get("drain_since") is None else float(d["drain_since"])
        busy = None if d.get("last_busy") is None else float(d["last_busy"])
        samples = tuple((float(t), float(w), float(r), float(k)) for t, w, r, k in d.get("samples", []))
    except (AssertionError, KeyError, TypeError, ValueError):
        return None
    if not (0 <= target <= 100_000 and 0 <= built <= 100_000):
        return None
    target = min(rs.max, max(rs.min, target))
    return RoleMemory(max(built, target) if drain is not None else target, target, asks, changes,
                      drain if built > target else None, busy, samples)
