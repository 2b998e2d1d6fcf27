"""Allocations that left the queue without our scancel: said, with Slurm's own words, and their
workers' restart backoff cleared. (Replacing them is plan()'s ordinary business: the workers are
missing.) Slurm shows a job COMPLETING for a moment before its end state: the report waits for
it, bounded."""

from __future__ import annotations

import structlog

from reconciler.drivers import Driver
from reconciler.drivers.state import StateDir
from reconciler.shell.cluster.nodes import NodeWatch
from reconciler.shell.snapshot import Snapshot
from reconciler.timefmt import iso
from reconciler.world import Alloc

log = structlog.get_logger("reconciler")
LOSS_WAIT = 30.0  # seconds to wait for a lost job's end state before reporting what is known


class LostAllocations:
    def __init__(self, state: StateDir, driver: Driver, nodes: NodeWatch):
        self.state, self.driver, self.nodes = state, driver, nodes
        self.live: dict[str, Alloc] = {}  # last tick's live allocations (to notice one lost)
        self.cancelled: set[str] = set()  # allocations we released: their going is no loss
        self._ending: dict[str, tuple[Alloc, float]] = {}  # lost, waiting for Slurm's end state

    def note(self, snap: Snapshot) -> None:
        live = {a.job_id: a for a in snap.observed.allocs if a.live}
        for job_id, a in self.live.items():
            if job_id not in live and job_id not in self.cancelled and job_id not in self._ending:
                self._ending[job_id] = (a, snap.now)
                self.nodes.lost(a, "", snap.now)  # a node Slurm reports down is suspect before the replacement goes
                self._clear_backoff(a, snap)
        for job_id, (a, since) in list(self._ending.items()):
            end = self.driver.job_end(job_id)
            state, reason = end if end else ("GONE", "no longer known to Slurm")
            if state in ("COMPLETING", "RUNNING", "CONFIGURING") and snap.now - since < LOSS_WAIT:
                continue  # not ended yet: look again next tick
            del self._ending[job_id]
            lost = self.nodes.lost(a, state, snap.now)  # {node: Slurm's reason} when a node failed
            msg = (f"allocation {a.index} (job {job_id}) ended: {state}"
                   + (f" ({reason})" if reason and reason != "None" else "")
                   + "".join(f"; node {n} lost: {why}" for n, why in sorted(lost.items()))
                   + "; its workers move to a new one" + (" that excludes the lost node" if lost else ""))
            log.warning("allocation lost", recipe=a.recipe, job=job_id, state=state, reason=reason, nodes=lost)
            self.state.event("AllocationLost", a.recipe, msg, job=job_id, state=state, reason=reason, nodes=lost)
            self.state.write_json(self.state.recipe_dir(a.recipe) / "allocation-lost.json",
                                  {"job": job_id, "index": a.index, "state": state, "reason": reason,
                                   "nodes": lost, "at": iso(snap.now), "message": msg})
        self.live = live
        self.cancelled &= set(live)

    def _clear_backoff(self, a: Alloc, snap: Snapshot) -> None:
        """Its workers' lives went with the allocation: they move, they are not crash-looping, so
        the next launch (on the replacement) is not held by a backoff their own exits never earned
        (measured: a relaunch tried in the vanishing job made the one on the replacement wait 10 s)."""
        running = {s.life for s in snap.observed.steps_of(a.recipe)}
        for life in self.state.launches(a.recipe):
            if life not in running:
                self.state.reset_backoff(a.recipe, life)
