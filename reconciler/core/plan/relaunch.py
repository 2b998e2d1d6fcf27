"""compute_relaunch: a worker with no step comes back in place — or waits, or is given up on.

Same nodes, same ports (the port assignment is keyed by the worker), subject to its role's
restart policy: ``never``, ``on-failure`` (exit code 0 is final), ``always``;
``max_restarts``; exponential backoff from the end of the last life. A worker we stopped
on purpose (a rollout) comes back at once, and that launch is not a restart; so does one whose
spec changed since its last life failed (the old spec's backoff is not the new one's).
compute_backoff_reset: a worker Ready for ``reset_after_seconds`` starts its backoff
from scratch.
"""

from __future__ import annotations

from enum import Enum

from reconciler.core.plan.classify import Classified, UnitView
from reconciler.core.plan.results import LaunchStep, PlaceReason, StopReason, Wait, WaitReason
from reconciler.world import DesiredRecipe, RestartPolicy, UnitHealth


class Gate(str, Enum):
    LAUNCH = "launch"
    WAIT = "wait"
    STOP = "stop"


def restart_gate(policy: RestartPolicy, h: UnitHealth | None, now: float, spec: str = "",
                 run_key: str = "") -> tuple[Gate, PlaceReason | WaitReason, str, float | None]:
    """Whether a worker without a step is launched now: (gate, reason, detail, retry at)."""
    if h is None or h.launches == 0:
        return Gate.LAUNCH, PlaceReason.NEW, "", None
    if replaced_on_purpose(h):
        return Gate.LAUNCH, PlaceReason.REPLACEMENT, "", None
    if policy.policy == "once":
        return once_gate(policy, h, now, spec, run_key)
    code, ended = h.ended(now)
    how = "was killed" if code is None else f"exited with code {code}"
    if policy.policy == "never":
        return Gate.STOP, WaitReason.GAVE_UP, f"{how}; restart policy is never", None
    if policy.policy == "on-failure" and code == 0:
        return Gate.STOP, WaitReason.GAVE_UP, f"{how}; restart policy on-failure does not restart a clean exit", None
    if spec and h.last_spec and h.last_spec != spec:
        # the failing life ran another spec (a fixed recipe, a new cluster config): the new spec has
        # not failed yet, so it starts at once, with a fresh backoff (drivers/state.count_launch)
        return Gate.LAUNCH, PlaceReason.REPLACEMENT, f"{how}; its spec changed since: a fresh start", None
    if policy.max_restarts is not None and h.restarts >= policy.max_restarts:
        return Gate.STOP, WaitReason.GAVE_UP, f"{how}; gave up after {h.restarts} restarts (max_restarts)", None
    due = ended + policy.delay(h.restarts)
    if now < due:
        return Gate.WAIT, WaitReason.BACKOFF, f"{how}; relaunch in {due - now:.0f}s (restart {h.restarts + 1})", due
    return Gate.LAUNCH, PlaceReason.RELAUNCH, f"{how}; restart {h.restarts + 1}", None


def once_gate(policy: RestartPolicy, h: UnitHealth, now: float, spec: str,
              run_key: str = "") -> tuple[Gate, PlaceReason | WaitReason, str, float | None]:
    """A run-once unit whose last run ended. Unlike every other unit it is never restarted, whatever
    its exit (a benchmark that failed has a verdict, not a crash): a new run is a new launch
    (``PlaceReason.NEW``, not a restart) when its spec changed since that run (``on_change``: what
    it measures rolled out), its own definition changed (``run_key``: a benchmark's parameters or
    target), or its period since the run's end is over (``every_seconds``)."""
    code, ended = h.ended(now)
    how = "was killed" if code is None else f"exited with code {code}"
    if run_key and h.last_run_key is not None and h.last_run_key != run_key:
        return Gate.LAUNCH, PlaceReason.NEW, f"last run {how}; its definition changed: a new run", None
    if policy.on_change and spec and h.last_spec is not None and h.last_spec != spec:
        return Gate.LAUNCH, PlaceReason.NEW, f"last run {how}; its spec changed: a new run", None
    if policy.every_seconds is not None:
        due = ended + policy.every_seconds
        if now >= due:
            return Gate.LAUNCH, PlaceReason.NEW, f"last run {how}; its period is over: a new run", None
        return Gate.WAIT, WaitReason.FINISHED, f"last run {how}; next run in {due - now:.0f}s", due
    return Gate.STOP, WaitReason.FINISHED, f"last run {how}", None


def replaced_on_purpose(h: UnitHealth) -> bool:
    try:
        return h.stopped_for is not None and StopReason(h.stopped_for).on_purpose
    except ValueError:
        return False  # a reason written by another version: treat the end as a failure


def launches_for(d: DesiredRecipe, v: UnitView, reason: PlaceReason) -> tuple[LaunchStep, ...]:
    restart = (v.health.restarts + 1) if reason.restart and v.health else 0
    return tuple(LaunchStep(v.unit, l, v.job, reason, restart) for l in v.unit.launches)


def compute_relaunch(
    d: DesiredRecipe, c: Classified, held_back: frozenset[str], now: float
) -> tuple[tuple[LaunchStep, ...], dict[str, float], dict[str, Wait]]:
    """Missing units that had lives before (``compute_placements`` takes the never-launched)."""
    place: list[LaunchStep] = []
    later: dict[str, float] = {}
    waiting: dict[str, Wait] = {}
    for v in c.missing:
        if not v.ever_launched or v.name in held_back:
            continue
        gate, reason, detail, due = restart_gate(d.policy(v.unit.role), v.health, now, v.unit.spec_hash,
                                               v.unit.run_key)
        if gate is Gate.LAUNCH:
            place += launches_for(d, v, reason)  # type: ignore[arg-type]
        elif gate is Gate.WAIT:
            later[v.name] = due  # type: ignore[assignment]
            waiting[v.name] = Wait(reason if reason is WaitReason.FINISHED else WaitReason.BACKOFF, detail, due)
        else:
            waiting[v.name] = Wait(reason if reason is WaitReason.FINISHED else WaitReason.GAVE_UP, detail)
    return tuple(place), later, waiting


def compute_backoff_reset(d: DesiredRecipe, c: Classified, now: float) -> tuple[tuple[str, ...], float | None]:
    """Units whose backoff counter goes back to 0, and the next moment another one would."""
    reset: list[str] = []
    nxt: float | None = None
    for v in c.running:
        h = v.health
        if h is None or not h.restarts or h.ready_since is None or not v.ready:
            continue
        due = h.ready_since + d.policy(v.unit.role).reset_after_seconds
        if now >= due:
            reset.append(v.name)
        else:
            nxt = due if nxt is None else min(nxt, due)
    return tuple(reset), nxt
