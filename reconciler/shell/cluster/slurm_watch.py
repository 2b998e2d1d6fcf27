"""The edge of the Slurm-time policies: reservations, pending explanations, bad-node quarantine.

Asks Slurm the slow questions at a slow pace — ``scontrol show reservation`` and the partitions'
nodes every ``RECONCILER_SLURM_SLOW_SECONDS`` (60 s by default), ``squeue --start`` at the
pending-recheck pace (``core/plan/pending.start_due``) — keeps the quarantine in
state/quarantine.json, says what happened as events, and hands the core what it decides from:
per job the moment it must be gone (``Observed.deadlines``), per pending job Slurm's reason and
expected start (``Observed.pending``), per new allocation the nodes it excludes. The decisions
are the core's (core/plan/reservations.py, pending.py, quarantine.py, exclusion.py).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

import structlog

from reconciler.core.plan import quarantine as qpolicy
from reconciler.core.plan.exclusion import placeable_exclusion
from reconciler.core.plan.results import LaunchStep, PlaceReason
from reconciler.core.plan.pending import PendingInfo, start_due
from reconciler.core.plan.reservations import Member, Reservation, reserved_nodes, threat
from reconciler.drivers.state import StateDir
from reconciler.shell import refused
from reconciler.timefmt import iso, slurm_seconds
from reconciler.world import Alloc, AllocSpec, Desired, Step

log = structlog.get_logger("reconciler")
FILE = "quarantine.json"
SLOW_SECONDS = 60.0


class SlurmWatch:
    def __init__(self, state: StateDir, driver: object, policy: qpolicy.Policy | None = None):
        self.state = state
        self.driver = driver
        self.slow = float(os.environ.get("RECONCILER_SLURM_SLOW_SECONDS", SLOW_SECONDS))
        self.policy = policy or qpolicy.Policy()
        self.reservations: list[Reservation] = []
        self.partitions: dict[str | None, list[str]] = {}  # partition (None: the default) -> its nodes
        self._slow_at: float | None = None
        self._starts: dict[str, tuple[float | None, str, float]] = {}  # job -> (start, reason, asked at)
        self._said_pending: dict[str, str] = {}
        self._said_threat: dict[str, str] = {}
        self._said_dropped: set[tuple[str, str]] = set()
        self.history, self.quarantined = self._load()

    # ---------------------------------------------------------------- asking Slurm
    def refresh(self, allocs: Iterable[Alloc], desired: Desired, now: float) -> None:
        """The slow questions, when due: reservations and nodes (only when there is a recipe), the
        expected start of our pending jobs (only those due another look)."""
        allocs = list(allocs)
        if desired.recipes and hasattr(self.driver, "reservations") and (
                self._slow_at is None or now - self._slow_at >= self.slow):
            self._slow_at = now
            self.reservations = self.driver.reservations()  # type: ignore[attr-defined]
            wanted = {s.partition for d in desired.recipes.values() for s in d.allocs}
            # scontrol show partition (the driver's; None: Slurm did not say, so nothing is bounded)
            self.partitions = {p: list(self.driver.partition_nodes(p) or ())  # type: ignore[attr-defined]
                               for p in sorted(wanted, key=str)}
        pending = [a for a in allocs if a.live and a.state == "PENDING"]
        live = {a.job_id for a in pending}
        self._starts = {j: v for j, v in self._starts.items() if j in live}
        due = [a.job_id for a in pending if start_due(self._starts.get(a.job_id, (None, "", None))[2],
                                                        a.submitted, now)]
        if due and hasattr(self.driver, "pending_starts"):
            got = self.driver.pending_starts(due)  # type: ignore[attr-defined]
            for a in pending:
                if a.job_id in due:
                    start, reason = got.get(a.job_id, (None, a.reason))
                    self._starts[a.job_id] = (start, reason, now)

    def next_slow(self) -> float | None:
        return None if self._slow_at is None else self._slow_at + self.slow

    # ---------------------------------------------------------------- what the core is given
    def pending(self, allocs: Iterable[Alloc]) -> dict[str, PendingInfo]:
        out = {}
        for a in allocs:
            if a.live and a.state == "PENDING":
                start, _reason, _at = self._starts.get(a.job_id, (None, "", 0.0))
                out[a.job_id] = PendingInfo(a.job_id, a.index, a.reason, start, a.submitted)
        return out

    def member(self, spec: AllocSpec | None) -> Member:
        names = frozenset((spec.reservation or "").split(",")) - {""} if spec else frozenset()
        return Member(getattr(self.driver, "user", ""), spec.account if spec else None, names)

    def wishes(self, spec: AllocSpec, suspects: Iterable[str], now: float) -> list[str]:
        """The nodes a new allocation should avoid, most important first: suspect (failed) nodes,
        nodes reserved during its life, quarantined nodes."""
        life = slurm_seconds(spec.time_limit)
        return [*suspects, *reserved_nodes(self.reservations, now, life, self.member(spec)),
                *sorted(self.quarantined, key=lambda n: self.quarantined[n].since)]

    def exclude_for(self, spec: AllocSpec, suspects: Iterable[str], now: float) -> tuple[str, ...]:
        kept, dropped = placeable_exclusion(self.wishes(spec, suspects, now), self.partitions.get(spec.partition, []),
                                            spec.count)
        for n in dropped:
            if (spec.recipe, n) not in self._said_dropped:
                self._said_dropped.add((spec.recipe, n))
                self.state.event("ExclusionLimited", spec.recipe, f"node {n} is not excluded from allocation "
                                 f"{spec.index}: excluding it would leave fewer than the {spec.count} node(s) it needs")
        return kept

    def deadlines(self, allocs: Iterable[Alloc], desired: Desired, suspects: Iterable[str], now: float
                  ) -> dict[str, tuple[float, str]]:
        """job id -> (when it must be gone, why), for our running jobs a reservation will take, or
        on a quarantined node that new allocations can avoid (else a successor would land there too)."""
        out: dict[str, tuple[float, str]] = {}
        for a in allocs:
            d = desired.recipes.get(a.recipe)
            if not a.running or d is None:
                continue
            spec = next((s for s in d.allocs if s.index == a.index), None)
            left = slurm_seconds(a.time_left)
            hit = threat(a.nodes, now + left if left is not None else None, self.reservations, now, self.member(spec))
            bad = [n for n in a.nodes if n in self.quarantined]
            # only where the partition is known, so that a successor can be placed off the node (a driver
            # without partitions, the local one, would hand over onto the same host again and again)
            if (bad and spec is not None and self.partitions.get(spec.partition)
                    and set(bad) & set(self.exclude_for(spec, suspects, now))):
                q = self.quarantined[bad[0]]
                out[a.job_id] = (now, f"node {bad[0]} quarantined: {q.why}")
            elif hit is not None:
                out[a.job_id] = hit
        return out

    # ---------------------------------------------------------------- after a tick
    def note(self, observed_pending: Mapping[str, PendingInfo], deadlines: Mapping[str, tuple[float, str]],
             allocs: Iterable[Alloc], now: float) -> None:
        """Events when a pending allocation's reason or start changes, and when a reservation or a
        quarantine first moves a job's end."""
        by_job = {a.job_id: a for a in allocs}
        said = {}
        for job, info in observed_pending.items():
            key = f"{info.reason}|{info.start}"
            said[job] = key
            if self._said_pending.get(job) != key and job in by_job:
                self.state.event("AllocationPending", by_job[job].recipe, info.explain(now), job=job,
                                 reason=info.reason, expectedStart=iso(info.start) if info.start else None)
        self._said_pending = said
        threats = {}
        for job, (_at, why) in deadlines.items():
            threats[job] = why
            if self._said_threat.get(job) != why and job in by_job:
                a = by_job[job]
                log.warning("allocation must end early", recipe=a.recipe, job=job, why=why)
                self.state.event("AllocationEndsEarly", a.recipe, f"allocation {a.index} (job {job}): {why}; "
                                 "its workers move to a successor before then", job=job)
        self._said_threat = threats

    def failures(self, actions: Iterable[object], observed, failed_launches: Iterable[Step], desired: Desired,
                 now: float, bind_failed: frozenset[str] = frozenset()) -> None:
        """Charge this tick's worker failures to their nodes; quarantine the ones over the threshold.
        ``bind_failed``: the workers whose last life could not bind a port (not charged)."""
        rank_nodes = {(d.name, u.name): tuple(n for l in u.launches for n in l.nodes[:1])
                      for d in desired.recipes.values() for u in d.units}
        failed_launches = list(failed_launches)
        new = qpolicy.failures(actions, observed, failed_launches, now, rank_nodes, bind_failed,
                               self.refused(actions, failed_launches))
        before = dict(self.quarantined)
        history, quarantined = qpolicy.step(self.history, before, new, now, self.policy)
        for node in sorted(set(quarantined) - set(before)):
            q = quarantined[node]
            msg = (f"node {node} quarantined until {iso(q.until)}: {q.why}; new allocations exclude it and "
                   "allocations of ours on it hand over")
            log.warning("node quarantined", node=node, why=q.why)
            self.state.event("NodeQuarantined", None, msg, node=node, until=iso(q.until))
        for node in sorted(set(before) - set(quarantined)):
            self.state.event("NodeReleased", None, f"node {node} leaves quarantine (cool-down of "
                             f"{self.policy.cooldown:g}s over)", node=node)
        if new or quarantined != before:
            self.history, self.quarantined = history, quarantined
            self._save()

    def refused(self, actions: Iterable[object], failed_launches: list[Step]) -> frozenset[str]:
        """"<recipe>/<unit>" whose failed launch, or whose life before this tick's relaunch, the
        cluster refused for the recipe's or the cluster config's own reason: no node is at fault."""
        out = {f"{s.recipe}/{s.role}_{s.index}" for s in failed_launches if refused.launch_refusal(self.state.root, s)}
        for a in actions:
            if isinstance(a, LaunchStep) and a.reason is PlaceReason.RELAUNCH and a.launch.rank == 0 \
                    and refused.relaunched_refusal(self.state.root, a.unit.recipe, a.unit.name, a.unit.slot,
                                               a.unit.spec_hash):
                out.add(f"{a.unit.recipe}/{a.unit.name}")
        return frozenset(out)

    # ---------------------------------------------------------------- state
    def _load(self) -> tuple[list[qpolicy.Failure], dict[str, qpolicy.Quarantined]]:
        raw = self.state.read_json(self.state.root / FILE, {}, lambda x: isinstance(x, dict))
        try:
            history = [qpolicy.Failure(f["node"], float(f["at"]), f["what"], f["unit"], float(f.get("span", 0.0)))
                       for f in raw.get("failures", [])]
            q = {n: qpolicy.Quarantined(n, float(r["since"]), float(r["until"]), r["why"])
                 for n, r in raw.get("quarantined", {}).items()}
        except (KeyError, TypeError, ValueError, AttributeError):
            return [], {}  # a damaged file: no node is quarantined
        return history, q

    def _save(self) -> None:
        self.state.write_json(self.state.root / FILE, {
            "threshold": self.policy.threshold, "windowSeconds": self.policy.window,
            "cooldownSeconds": self.policy.cooldown,
            "failures": [{"node": f.node, "at": f.at, "what": f.what, "unit": f.unit, "span": f.span}
                         for f in self.history],
            "quarantined": {n: {"since": q.since, "until": q.until, "untilIso": iso(q.until), "why": q.why}
                            for n, q in sorted(self.quarantined.items())}})
