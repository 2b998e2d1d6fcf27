"""Facts: the cluster (one job query, one step query), probes, launch and exit records, log lines.

The observer remembers only what squeue cannot tell yet (launches in flight, steps we
just cancelled — the core's ``grace`` decides for how long) and what is costly to
re-learn (probe history and log offsets, in the ``HealthTracker``; which logs were
already read). Losing this memory (a restart) is safe. It writes nothing.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from reconciler.core.grace import apply_grace
from reconciler.core.probe_pace import split_due
from reconciler.core.plan.results import StopReason
from reconciler.drivers import Driver
from reconciler.shell.readiness.health import HealthTracker
from reconciler.core.ports import NodePortAllocator
from reconciler.shell.readiness import canary
from reconciler.shell.readiness.probe import ProbeMemory, probe_units
from reconciler.drivers.state import StateDir
from reconciler.world import Alloc, Desired, InFlight, Step, UnitHealth

BIND_FAILURE = re.compile(r"address already in use|EADDRINUSE|\[Errno 98\]", re.IGNORECASE)

Key = tuple[str, str, int]


@dataclass(frozen=True)
class ClusterFacts:
    allocs: tuple[Alloc, ...]
    steps: tuple[Step, ...]  # with the core's grace applied
    failed_launches: tuple[InFlight, ...]  # launcher exited before its step ever showed up
    bind_failures: dict[str, dict[str, dict[str, int]]]  # owner -> ports of its last life, which could not bind


class Observer:
    def __init__(self, state: StateDir, driver: Driver):
        self.state = state
        self.driver = driver
        self.cancelled: dict[str, float] = {}  # step id -> when we cancelled it
        self.inflight: list[InFlight] = []
        self.tracker = HealthTracker(state.root)
        self.seen_jobs: frozenset[str] = frozenset()  # job ids of the last observation
        # how long a probe waits for a frontend's canary: a pass of `run` reads the last answer after
        # a moment (the next pass reads the rest); a one-shot pass (get, plan, run --once) has no
        # next pass, so it waits for the whole canary
        self.canary_wait = canary.CANARY_WAIT
        self.probes = ProbeMemory()  # kept connections and canaries: this controller's own
        self._logs_read: dict[tuple[str, int, int], bool] = {}  # (path, inode, size) -> shows a bind failure
        # (unit key, step id of its life) -> when last probed, its answer
        self._probed: dict[tuple[str, str, int, str], tuple[float, bool]] = {}
        # (unit key, step id) of a surging worker's old life -> its failed probes in a row since Ready
        self._old_failures: dict[tuple[str, str, int, str], int] = {}

    # ---------------------------------------------------------------- the cluster
    def cluster(self, ports: NodePortAllocator, now: float) -> ClusterFacts:
        allocs, steps = self.driver.observe()
        self.seen_jobs = frozenset(a.job_id for a in allocs)  # shell/submitted.py: what squeue shows
        inflight = [InFlight(f.step, f.launched_at, _poll(f)) for f in self.inflight]
        view = apply_grace(steps, self.cancelled, inflight, now)
        self.cancelled = dict(view.cancelled)
        kept = {id(f.step) for f in view.inflight}
        self.inflight = [f for f in self.inflight if id(f.step) in kept]
        return ClusterFacts(tuple(allocs), view.steps, view.failed_launches, self._bind_failures(view.steps, ports))

    def launched(self, step: Step, handle, now: float) -> None:
        self.inflight.append(_Tracked(step, now, handle))

    def cancelling(self, step_id: str, now: float) -> None:
        self.cancelled[step_id] = now

    def _bind_failures(self, steps: tuple[Step, ...], ports: NodePortAllocator) -> dict:
        running = {f"{s.recipe}/{s.life}" for s in steps} | {f"{s.recipe}/{s.role}_{s.index}" for s in steps}
        read, self._logs_read = self._logs_read, {}
        out: dict[str, dict[str, dict[str, int]]] = {}
        records: dict[str, dict] = {}
        for owner in sorted(ports.owners() - running):
            recipe, unit = owner.split("/", 1)
            logs = self.state.recipe_dir(recipe) / "logs"
            for log_path in logs.glob(f"{unit}.*.log") if logs.is_dir() else ():
                try:
                    st = os.stat(log_path)
                except OSError:
                    continue
                mark = (str(log_path), st.st_ino, st.st_size)
                hit = read[mark] if mark in read else bool(BIND_FAILURE.search(tail(log_path, 8192)))
                self._logs_read[mark] = hit  # a log that did not change is not read again
                if hit:
                    if recipe not in records:
                        records[recipe] = self.state.launches(recipe)
                    used = records[recipe].get(unit.split("@", 1)[0], {}).get("ports")  # a life records under its unit
                    if used:
                        out[owner] = used
                    break
        return out

    # ---------------------------------------------------------------- the workers
    def health(self, desired: Desired, steps: tuple[Step, ...], now: float) -> tuple[dict, dict[Key, UnitHealth]]:
        """Probe the running units; per unit, its lives and exits (state/), probe history and fatal lines."""
        units = [u for d in desired.recipes.values() for u in d.all_units]
        running = {s.unit_key for s in steps if not s.pending}
        # a unit is probed when its own life runs: beside a surging worker's old life, the new slot's
        # URL answers nothing yet, and it must not inherit the old life's Ready
        lives = {(*s.unit_key, s.slot) for s in steps if not s.pending}
        up = [u for u in units if (*u.key, u.slot) in lives]
        # the last probe of each life (its rank-0 step): a relaunched unit is probed at once
        life = {s.unit_key: s.step_id for s in steps if not s.pending and s.rank == 0}
        self._probed = {k: v for k, v in self._probed.items() if k[:3] in running and life.get(k[:3]) == k[3]}
        last = {k[:3]: t for k, (t, _) in self._probed.items()}
        now_keys, later = split_due([(u.key, u.probe_interval) for u in up], last, now)
        todo = set(now_keys)
        ready = probe_units([u for u in up if u.key in todo], canary_wait=self.canary_wait, memory=self.probes)
        self._probed |= {(*k, life.get(k, "")): (now, ok) for k, ok in ready.items()}
        kept = {k: v[1] for k, v in ((k, self._probed.get((*k, life.get(k, "")))) for k in later) if v is not None}
        out: dict[Key, UnitHealth] = {}
        records = {name: self.state.launches(name) for name in desired.recipes}
        for u in units:
            rec = records[u.recipe].get(u.name, {})
            last_exit = None
            if (*u.key, u.slot) in lives:
                self.tracker.seen_running(u.key)
                self.tracker.scan_logs(u)
                if u.probe == "log":
                    ready[u.key] = self.tracker.life(u.key).log_ready
                if u.key in kept:
                    ready[u.key] = kept[u.key]
                else:
                    # liveness follows the health probe: a frontend whose canary fails (its workers
                    # are down, the model is gone from etcd) is not Ready, but not dead either
                    self.tracker.probed(u.key, bool(ready.get(u.key)) or u.key in self.probes.canaries.why, now)
                missing = None
            else:
                missing = self.tracker.seen_missing(u.key, now) if rec.get("launches") else None
                # the exit of the life launched last, when it ran in this slot (a surge life that ended)
                if rec.get("launches") and rec.get("slot", 0) == u.slot:
                    last_exit = self.state.exit_status(u.recipe, u.life)
            life = self.tracker.life(u.key)
            # "replace": the record of an earlier version for a rollout stop
            stopped_for = rec.get("stoppedFor") or (StopReason.SPEC_CHANGED.value if rec.get("replace") else None)
            out[u.key] = UnitHealth(
                launches=rec.get("launches", 0), restarts=rec.get("backoff", 0), last_launch=rec.get("lastLaunch"),
                last_exit=last_exit, missing_since=missing, stopped_for=stopped_for, was_ready=life.was_ready,
                ready_since=life.ready_since, first_ready=life.first_ready, probe_failures=life.probe_failures,
                failing_since=life.failing_since, fatal=life.fatal,
                watched_since=life.watched_since, ready_after=rec.get("readyAfter"),
                took=rec.get("readyAfter", rec.get("lastReadyAfter")), last_spec=rec.get("spec"),
                last_run_key=rec.get("runKey"),
            )
        return ready, out


    def previous_ready(self, desired: Desired, steps: tuple[Step, ...]) -> tuple[dict[Key, bool], dict[Key, int]]:
        """Probe the old lives that surge lives will replace (still running in their old slot), and
        count each one's failed probes in a row since it was Ready (Observed.previous_failures: one
        slow answer must not unroute a life that may be its role's only worker)."""
        live: dict[tuple[str, str, int, int], str] = {}
        for s in steps:
            if not s.pending and (s.rank == 0 or (s.recipe, s.role, s.index, s.slot) not in live):
                live[(s.recipe, s.role, s.index, s.slot)] = s.step_id
        old = [u for d in desired.recipes.values() for u in d.previous.values() if (*u.key, u.slot) in live]
        ready = probe_units(old, forget_idle=False, canary_wait=self.canary_wait, memory=self.probes) if old else {}
        counts: dict[tuple[str, str, int, str], int] = {}  # (unit key, step id of the old life) -> failures
        for u in old:
            k = (*u.key, live[(*u.key, u.slot)])
            if ready.get(u.key):
                counts[k] = 0
            elif k in self._old_failures:  # Ready before: one more failure in a row
                counts[k] = self._old_failures[k] + 1
        self._old_failures = counts  # a life gone, or never Ready, is forgotten
        return ready, {k[:3]: n for k, n in counts.items()}


@dataclass
class _Tracked:
    step: Step
    launched_at: float
    handle: object


def _poll(f) -> int | None:
    h = getattr(f, "handle", None)
    return h.poll() if h is not None else None


def tail(path: Path, limit: int = 400) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.path.getsize(path) - limit))
            return f.read().decode(errors="replace").strip()
    except OSError:
        return ""
