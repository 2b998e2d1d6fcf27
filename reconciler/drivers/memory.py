"""Slurm in memory, for tests and benchmarks of the shell: allocations and steps are records,
``observe`` counts as one job query and one step query, nothing runs.

Submitted allocations run at once unless ``alloc_state`` says otherwise (a queue that never
moves: PENDING with ``reason``, submitted ``queued_for`` seconds before the clock). Subclasses
hook ``on_launch`` (a benchmark serves the unit's port) or make ``launch`` fail.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable

from reconciler.world import Launch, Unit
from reconciler.world import Alloc, AllocSpec, Step


class MemoryDriver:
    name = "memory"

    def __init__(self, owner: str = "test", clock: Callable[[], float] = time.time, alloc_state: str = "RUNNING",
                 reason: str = "None", queued_for: float = 0.0, host: str = "localhost"):
        self.owner = owner
        self.clock, self.alloc_state, self.reason, self.queued_for, self.host = clock, alloc_state, reason, queued_for, host
        self.allocs: dict[str, Alloc] = {}
        self.steps: dict[str, Step] = {}
        self.commands = 0
        self.queries = 0  # observe() counts two: the job query and the step query
        self._ids = itertools.count(1)

    def observe(self) -> tuple[list[Alloc], list[Step]]:
        self.queries += 2
        self.commands += 2
        return list(self.allocs.values()), list(self.steps.values())

    def submit(self, spec: AllocSpec) -> str:
        self.commands += 1
        job = str(next(self._ids))
        running = self.alloc_state == "RUNNING"
        self.allocs[job] = Alloc(job, spec.recipe, spec.index, spec.start, spec.count, self.alloc_state, self.reason,
                                 (self.host,) * spec.count if running else (),
                                 submitted=self.clock() - self.queued_for, gpus=spec.gpus_per_node,
                                 packed=spec.packed or None)
        return job

    def launch(self, job_id: str, unit: Unit, launch: Launch, step_name: str) -> None:
        self.commands += 1
        self.on_launch(unit, launch)
        sid = f"{job_id}.{next(self._ids)}"
        self.steps[sid] = Step(sid, unit.recipe, unit.role, unit.index, launch.rank, unit.spec_hash, launch.nodes,
                                    slot=unit.slot)

    def on_launch(self, unit: Unit, launch: Launch) -> None:
        """Before the step exists (raise to make the launch fail)."""

    def cancel_step(self, step_id: str) -> None:
        self.commands += 1
        self.steps.pop(step_id, None)

    def cancel_alloc(self, job_id: str) -> None:
        self.commands += 1
        self.allocs.pop(job_id, None)
        self.steps = {k: s for k, s in self.steps.items() if s.job_id != job_id}

    def job_end(self, job_id: str) -> tuple[str, str] | None:
        return None

    def reap(self) -> None:
        pass
