"""Bad-node quarantine: a node where our workers keep failing is left out of new allocations for a while. Pure.

The policy (docs/operations.md, "Quarantine"):

- A worker failure is charged to the node(s) it ran on: a life stopped for a fatal log line,
  the ranks left of a worker that lost one (charged to the lost rank's node), a launch that
  failed (srun could not start the step), and a relaunch after a life that ended by itself with a
  non-zero exit code (the engine printed its fatal line and exited before we could stop it) —
  but not one that exited because another process holds one of its ports (a PortConflict: the
  worker moves to other ports; the node is not at fault), nor one the cluster refused for the
  recipe's or the cluster config's own reason (``core/refusal.py``: an unknown srun option, a bad
  partition, a missing container image, an unrecognised engine flag): it fails alike on every node.
- A node charged ``threshold`` failures within ``window`` seconds is quarantined for
  ``cooldown`` seconds: new allocations exclude it (through ``exclusion.placeable_exclusion``,
  so never so many nodes that a worker becomes unplaceable), and a running allocation of ours
  on it is handed over at once (``plan/allocations.py``) so the failing workers land elsewhere.
  Its failures are forgotten when it enters quarantine: after the cool-down it starts afresh.
- Failures older than the window are forgotten — or, for a worker whose lives are long (an
  engine that loads for minutes and fails at the end of each load), older than ``threshold``
  such lives (``counted_for``): it can fail only once per life, and must be able to reach the
  threshold all the same.

Time is an argument; the failures come from the plan's own actions (``failures``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from reconciler.core.plan.results import CancelStep, LaunchStep, PlaceReason, StopReason
from reconciler.world import Observed, Step, UnitHealth

THRESHOLD = 3
WINDOW = 600.0
COOLDOWN = 900.0
CHARGED = {StopReason.FATAL_LOG: "fatal log line", StopReason.RANK_LOST: "lost rank"}


@dataclass(frozen=True)
class Failure:
    node: str
    at: float
    what: str  # "fatal log line", "lost rank", "launch failed", "exited with a fatal line"
    unit: str  # recipe/unit
    # the least time the unit takes to fail again: the failed life's length when it never was
    # Ready (it failed while loading), else its launch-to-Ready (the next life loads first); 0: unknown
    span: float = 0.0


@dataclass(frozen=True)
class Quarantined:
    node: str
    since: float
    until: float
    why: str  # the failures that put it there


@dataclass(frozen=True)
class Policy:
    threshold: int = THRESHOLD
    window: float = WINDOW
    cooldown: float = COOLDOWN


def failures(actions: Iterable[object], observed: Observed, failed_launches: Iterable[Step], now: float,
             rank_nodes: Mapping[tuple[str, str], tuple[str, ...]] | None = None,
             bind_failed: frozenset[str] = frozenset(), refused: frozenset[str] = frozenset()) -> list[Failure]:
    """The worker failures this tick's actions and launches reveal, one per node and unit.
    ``rank_nodes``: (recipe, unit) -> the node of each rank (the desired units'), to find the
    node of a rank that is gone. ``bind_failed``: "<recipe>/<unit>" whose last life exited because
    another process holds one of its ports: the worker moves to other ports (a PortConflict), and
    the node, whose GPUs did nothing wrong, is not charged for it. ``refused``: "<recipe>/<unit>"
    whose launch or last life the cluster refused for the recipe's own reason (a ConfigError):
    not charged either."""
    steps = {s.step_id: s for s in observed.steps}
    out: list[Failure] = []
    for a in actions:
        if isinstance(a, CancelStep) and a.reason in CHARGED and a.step_id in steps:
            s = steps[a.step_id]
            if a.reason is StopReason.RANK_LOST:
                continue  # the survivors are stopped; the lost rank's node is charged below
            span = life_span(observed.health.get(s.unit_key), now)
            out += [Failure(n, now, CHARGED[a.reason], f"{s.recipe}/{a.unit}", span) for n in s.nodes]
        elif isinstance(a, LaunchStep) and a.reason is PlaceReason.RELAUNCH and a.launch.rank == 0:
            h = observed.health.get(a.unit.key)
            code = h.ended(now)[0] if h else None
            # a life that ended by itself with an error (not one we stopped: that is charged above)
            if h is not None and h.stopped_for is None and code not in (None, 0) \
                    and f"{a.unit.recipe}/{a.unit.name}" not in bind_failed | refused:
                what = "exited with a fatal line" if h.fatal else f"exited {code}"
                out += [Failure(n, now, what, f"{a.unit.recipe}/{a.unit.name}", life_span(h, now)) for n in a.unit.nodes]
    for a in actions:  # a worker that lost a rank: the node whose rank is gone
        if isinstance(a, CancelStep) and a.reason is StopReason.RANK_LOST and a.step_id in steps:
            s = steps[a.step_id]
            have = {x.rank for x in observed.steps if x.unit_key == s.unit_key and x.job_id == s.job_id}
            nodes = (rank_nodes or {}).get((s.recipe, a.unit), ())
            gone = [n for r, n in enumerate(nodes) if r not in have]
            span = life_span(observed.health.get(s.unit_key), now)
            out += [Failure(n, now, "lost rank", f"{s.recipe}/{a.unit}", span) for n in gone]
    out += [Failure(n, now, "launch failed", f"{s.recipe}/{s.role}_{s.index}") for s in failed_launches for n in s.nodes
            if f"{s.recipe}/{s.role}_{s.index}" not in refused]
    seen: set[tuple[str, str]] = set()
    return [f for f in out if (f.node, f.unit) not in seen and not seen.add((f.node, f.unit))]  # type: ignore[func-returns-value]


def life_span(h: UnitHealth | None, now: float) -> float:
    """``Failure.span`` of the unit's life that failed (its last launch up to its end, or now)."""
    if h is None or h.last_launch is None:
        return 0.0
    if h.was_ready:
        return h.ready_after or h.took or 0.0
    return max(0.0, h.ended(now)[1] - h.last_launch)


def counted_for(f: Failure, policy: Policy) -> float:
    """How long a failure counts: the window, or ``threshold`` lives of the failing unit when that
    is longer (a node that breaks a slow engine at the end of each load is charged no more often
    than once per load)."""
    return max(policy.window, policy.threshold * f.span)


def step(history: Iterable[Failure], quarantined: Mapping[str, Quarantined], new: Iterable[Failure], now: float,
         policy: Policy) -> tuple[list[Failure], dict[str, Quarantined]]:
    """(failures still counted, nodes in quarantine) after this tick."""
    q = {n: x for n, x in quarantined.items() if x.until > now}
    kept = [f for f in [*history, *new] if now - f.at < counted_for(f, policy) and f.node not in q]
    per: dict[str, list[Failure]] = {}
    for f in kept:
        per.setdefault(f.node, []).append(f)
    for node, fs in per.items():
        if len(fs) >= policy.threshold:
            kinds = sorted({f.what for f in fs})
            units = sorted({f.unit for f in fs})
            q[node] = Quarantined(node, now, now + policy.cooldown,
                                  f"{len(fs)} worker failures in {max(counted_for(f, policy) for f in fs):g}s "
                                  f"({', '.join(kinds)}; "
                                  f"{', '.join(units)})")
    return [f for f in kept if f.node not in q], q


def ends(quarantined: Mapping[str, Quarantined]) -> float | None:
    return min((x.until for x in quarantined.values()), default=None)
