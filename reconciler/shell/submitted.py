"""The jobs this reconciler submitted, per allocation slot: none is submitted again unseen.

The plan asks for an allocation whenever squeue shows none for its slot (recipe, index). A job
submitted but never shown by our squeue (submitted as another user, hidden by Slurm's
PrivateData, or squeue lagging) was therefore submitted again at every pass: 44 jobs in 20 s.
Here each slot remembers the last job submitted for it. When the plan asks for the slot again,
that job is not in our squeue (else the plan would not ask): it is replaced only once Slurm says
it ended (``scontrol show job``) or no longer knows it; while Slurm says it is alive, nothing is
submitted, and why is said once (an event and a log line).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import structlog

from reconciler.drivers import Driver
from reconciler.drivers.state import StateDir
from reconciler.world import AllocSpec

log = structlog.get_logger("reconciler")

# JobState values of a job that is over (Slurm's job_state_string): its slot may be filled again
ENDED = frozenset({"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL",
                   "DEADLINE", "OUT_OF_MEMORY", "REVOKED", "SPECIAL_EXIT"})
LOOK_EVERY = 10.0  # seconds between scontrol questions about one unseen job (not one per pass)
Slot = tuple[str, int]


@dataclass
class Submitted:
    state: StateDir
    driver: Driver
    seen: Callable[[], frozenset[str]] = frozenset  # job ids our last squeue listed
    jobs: dict[Slot, tuple[str, float]] = field(default_factory=dict)  # slot -> (job id, submitted at)
    _looked: dict[Slot, tuple[float, str]] = field(default_factory=dict)  # slot -> (when asked, the answer)
    _said: dict[Slot, tuple[str, str]] = field(default_factory=dict)  # slot -> (job, state) last said

    def note(self, spec: AllocSpec, job: str, now: float | None = None) -> None:
        """``job`` was submitted for the slot of ``spec``."""
        slot = (spec.recipe, spec.index)
        self.jobs[slot] = (job, time.time() if now is None else now)
        self._looked.pop(slot, None)

    def cancelled(self, job: str) -> None:
        """We cancelled ``job``: its slot's next submission replaces it."""
        for slot in [s for s, (j, _) in self.jobs.items() if j == job]:
            del self.jobs[slot]
            self._looked.pop(slot, None)

    def holds(self, spec: AllocSpec, now: float | None = None) -> str | None:
        """Why the slot of ``spec`` must not be submitted again now (None: it may)."""
        slot = (spec.recipe, spec.index)
        if slot not in self.jobs:
            return None
        now = time.time() if now is None else now
        job, at = self.jobs[slot]
        if job in self.seen():  # listed: the plan wants another job for the slot on purpose
            del self.jobs[slot]
            return None
        looked = self._looked.get(slot)
        if looked is not None and now - looked[0] < LOOK_EVERY:
            return looked[1]
        end = self.driver.job_end(job)
        if end is None or end[0].split()[0] in ENDED:
            # over, or forgotten by Slurm (MinJobAge): a new job for the slot is what the plan wants
            del self.jobs[slot]
            self._looked.pop(slot, None)
            return None
        user = getattr(self.driver, "user", None)
        why = (f"job {job}, submitted {now - at:.0f} s ago for allocation {spec.index}, is {end[0]} in Slurm but not "
               f"among the jobs squeue lists{f' for user {user}' if user else ''}; not submitting another "
               f"until Slurm says it ended (scancel {job} to replace it)")
        if self._said.get(slot) != (job, end[0]):  # said once per job and state, not each look
            self._said[slot] = (job, end[0])
            log.warning("submitted job not seen", recipe=spec.recipe, job=job, state=end[0])
            self.state.event("SubmittedJobUnseen", spec.recipe, why, job=job)
        self._looked[slot] = (now, why)
        return why

    def orphans(self, planned: set[str]) -> list[tuple[str, str]]:
        """(recipe, job) of the jobs we submitted, unseen, for recipes the plan no longer has (its
        file deleted): the plan cancels only what squeue lists, so these are ours to cancel."""
        return sorted((r, job) for (r, _), (job, _) in self.jobs.items() if r not in planned)
