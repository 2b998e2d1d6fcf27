"""Execute a plan's actions through the driver and record each one; a failing recipe stops there.

What a failure means for the next ticks (the action-error backoff) is the core's policy;
this module only counts failures per recipe and clears the count once the recipe's
actions go through.
"""

from __future__ import annotations

import errno
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from collections.abc import Callable
from pathlib import Path

import structlog

from reconciler import labels
from reconciler.core.plan import Action, CancelAlloc, CancelStep, LaunchStep, Plan, SubmitAlloc
from reconciler.drivers import Driver, DriverError
from reconciler.fsutil import write_if_changed
from reconciler.timefmt import span
from reconciler.shell.observe import Observer
from reconciler.drivers.state import StateDir
from reconciler.world import ActionFailures, AllocSpec, Step
from reconciler.shell.submitted import Submitted

log = structlog.get_logger("reconciler")

QUEUED_AFTER = 30.0  # seconds: an allocation Slurm expects to start later than this gets an ExpectedStart event
# Slurm's estimate behind a job with no time limit is its end of time (centuries away): not a date to print
NO_ESTIMATE_AFTER = 365 * 86400.0


def clear_marker(recipe_dir: Path, marker: Path) -> bool:
    """Remove a file probe's marker before a launch (a marker of the last life must not make this
    one Ready), only when it lies in the recipe's own directory: an absolute host path a recipe
    names is never deleted by us; the service clears it itself."""
    try:
        inside = marker.parent.resolve().is_relative_to(recipe_dir.resolve())
    except OSError:
        return False
    if inside:
        marker.unlink(missing_ok=True)
    return inside


SUBMIT_FAILED = "SubmitFailed"  # get's REASON while sbatch refuses a recipe's allocation
REASON_MAX = 300  # one line in a REASON column


def submit_refused(a: Action, why: str) -> tuple[str, str]:
    """(reason, message) for a failed submission: sbatch's own first error line (an invalid
    partition, account, QOS...), which get shows as REASON; nothing for other actions."""
    if not isinstance(a, SubmitAlloc):
        return "", ""
    lines = [ln.strip() for ln in why.splitlines() if ln.strip()]
    said = next((ln for ln in lines if "error:" in ln), lines[0] if lines else why)
    said = said[said.find("sbatch:"):] if "sbatch:" in said else said  # from sbatch's own words on
    return SUBMIT_FAILED, f"allocation {a.spec.index}: {said}"[:REASON_MAX]


class Executor:
    def __init__(self, state: StateDir, driver: Driver, observer: Observer):
        self.state = state
        self.driver = driver
        self.observer = observer
        self.failures: dict[str, ActionFailures] = {}  # recipe -> its actions' failures in a row
        self.on_action: Callable[[str, bool], None] | None = None  # (kind, succeeded): the metrics
        # suspect nodes (shell/cluster/nodes.py) a new allocation avoids, as many as leave it placeable
        self.exclusion: Callable[[AllocSpec], tuple[str, ...]] = lambda spec: ()
        self.submitted_excluding: dict[str, tuple[str, ...]] = {}  # job id -> what it was submitted excluding
        # why a new allocation waits a moment (no node of its partition back yet: shell/cluster/nodes.py)
        self.hold: Callable[[AllocSpec], str | None] = lambda spec: None
        self._held: dict[tuple[str, int], str] = {}  # (recipe, index) -> what was said, said once
        # the jobs submitted per allocation slot: one squeue does not show is not submitted again
        self.submitted = Submitted(state, driver, lambda: observer.seen_jobs)
        # raises (shell/lease.LeaseLost) once another reconciler took the state directory over
        self.fence: Callable[[], None] = lambda: None

    def execute(self, p: Plan) -> list[Action]:
        done: list[Action] = []
        for name, rp in p.recipes.items():
            if not rp.actions and not rp.deferred:
                self.failures.pop(name, None)  # nothing left to retry
        failed: set[str] = set()
        for a in p.actions:
            if a.recipe in failed:
                continue
            if isinstance(a, SubmitAlloc) and self._holding(a):
                continue
            self.fence()  # outside the try: a lost lease ends the pass, it is no failure of the recipe
            try:
                self._do(a)
            except Exception as e:  # noqa: BLE001 - DriverError, OSError, or anything else: this recipe only
                failed.add(a.recipe)
                prev = self.failures.get(a.recipe)
                full = isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT)
                why = f"state/ could not be written, the disk is full: {e}" if full else str(e)
                self.failures[a.recipe] = ActionFailures((prev.count if prev else 0) + 1, time.time(),
                                                         *submit_refused(a, why))
                log.error("action failed", recipe=a.recipe, action=a.describe(), error=why,
                          exc_info=not isinstance(e, DriverError | OSError))
                try:
                    self.state.event("ActionFailed", a.recipe, f"{a.describe()}: {why}",
                                     failures=self.failures[a.recipe].count)
                except OSError:
                    pass  # a full disk: the log line is all that can be said
                if self.on_action:
                    self.on_action(type(a).__name__, False)
                continue
            done.append(a)
            if self.on_action:
                self.on_action(type(a).__name__, True)
            log.info(a.describe())
            self.state.event(type(a).__name__, a.recipe, a.describe())
        for recipe in {a.recipe for a in done} - failed:
            self.failures.pop(recipe, None)
        if not p.refused_prune:  # the prune guard holds these as it holds what squeue lists
            self._cancel_orphans(set(p.recipes))
        return done

    def _cancel_orphans(self, planned: set[str]) -> None:
        """A deleted recipe's job that squeue never listed (shell/submitted.py) is cancelled too."""
        for recipe, job in self.submitted.orphans(planned):
            try:
                self.driver.cancel_alloc(job)
            except DriverError as e:
                log.error("cannot cancel an unseen job of a deleted recipe", recipe=recipe, job=job, error=str(e))
                continue
            self.submitted.cancelled(job)
            log.info("cancelled an unseen job of a deleted recipe", recipe=recipe, job=job)
            self.state.event("CancelAlloc", recipe, f"cancel job {job}: its recipe is gone and squeue never listed it")

    def _holding(self, a: SubmitAlloc) -> bool:
        """Not submitted yet (said once): the plan asks again at the next pass."""
        key = (a.spec.recipe, a.spec.index)
        why = self.hold(a.spec)
        if why is None:
            self._held.pop(key, None)
            return self.submitted.holds(a.spec) is not None  # says why itself, once
        if self._held.get(key) != why:
            self._held[key] = why
            log.info("submission held", recipe=a.spec.recipe, allocation=a.spec.index, why=why)
            self.state.event("SubmissionHeld", a.spec.recipe, f"allocation {a.spec.index} not submitted yet: {why}")
        return True

    def _estimate(self, spec: AllocSpec) -> float | None:
        """Slurm's start estimate, only reported: a driver without one, or a slow or failing
        answer, never stops the submission itself."""
        ask = getattr(self.driver, "expected_start", None)
        try:
            return ask(spec) if ask is not None else None
        except DriverError as e:
            log.warning("no start estimate", recipe=spec.recipe, error=str(e))
            return None

    def _queued(self, a: SubmitAlloc, job: str, start: float | None) -> None:
        """An allocation Slurm will not start at once: said when it is submitted, with Slurm's
        estimate (``sbatch --test-only``); ``describe`` keeps following it (``squeue --start``)."""
        wait = (start - time.time()) if start is not None else 0.0
        if wait < QUEUED_AFTER:
            return
        when = (f"in {span(wait)}" if wait < NO_ESTIMATE_AFTER else
                "only after jobs without a time limit end (its estimate is years away)")
        msg = f"allocation {a.spec.index} (job {job}): Slurm expects it to start {when} (sbatch --test-only)"
        log.info("queued", recipe=a.recipe, job=job, expected_in=round(wait))
        with self._done_anyway(a):
            self.state.event("ExpectedStart", a.recipe, msg)

    @contextmanager
    def _done_anyway(self, a: Action) -> Iterator[None]:
        """The bookkeeping after an action that ran: a state directory that refuses the write (a
        full disk) is said as such; the action is not reported failed, nor retried as if it had."""
        try:
            yield
        except OSError as e:
            what = "the disk is full" if e.errno in (errno.ENOSPC, errno.EDQUOT) else e.strerror or str(e)
            msg = f"{a.describe()}: done, but its record could not be written to state/ ({what}: {e})"
            log.error("state not written", recipe=a.recipe, action=a.describe(), error=str(e))
            try:
                self.state.event("StateWriteFailed", a.recipe, msg)
            except OSError:
                pass  # the log line above is all that can be said

    def _do(self, a: Action) -> None:
        if isinstance(a, CancelStep):
            self.driver.cancel_step(a.step_id)
            self.observer.cancelling(a.step_id, time.time())
            if a.reason.ends_unit:  # an old life leaving beside its running successor is not the unit's end
                with self._done_anyway(a):
                    self.state.mark_stopped(a.recipe, a.unit, a.reason.value)
        elif isinstance(a, CancelAlloc):
            self.driver.cancel_alloc(a.job_id)
            self.submitted.cancelled(a.job_id)
        elif isinstance(a, SubmitAlloc):
            exclude = self.exclusion(a.spec)
            spec = replace(a.spec, exclude=exclude) if exclude else a.spec
            start = self._estimate(spec)
            job = self.driver.submit(spec)
            self.submitted.note(spec, job)
            if exclude:
                self.submitted_excluding[job] = exclude
            self._queued(a, job, start)
        elif isinstance(a, LaunchStep):
            u, l = a.unit, a.launch
            for path, content in u.files.items():
                write_if_changed(Path(path), content)
            if u.probe == "file" and l.rank == 0:
                clear_marker(self.state.root / u.recipe, Path(u.probe_arg))
            name = labels.step_name(self.driver.owner, u.recipe, u.role, u.index, l.rank, u.spec_hash, u.slot)
            handle = self.driver.launch(a.job_id, u, l, name)
            now = time.time()
            if l.rank == 0:
                with self._done_anyway(a):
                    self.state.count_launch(u.recipe, u.name, now, restart=a.reason.restart,
                                            ports={u.nodes[0]: dict(u.ports)} if u.ports else {}, slot=u.slot,
                                            spec=u.spec_hash, run_key=u.run_key)
                self.observer.tracker.new_life(u.key)
                self.observer.probes.canaries.new_life(u.key, u.slot)  # a relaunch keeps its port: no answer of the last life stands
            if handle is not None:
                pseudo = Step(f"{a.job_id}.pending-{u.life}-{l.rank}", u.recipe, u.role, u.index, l.rank,
                              u.spec_hash, l.nodes, pending=True, slot=u.slot)
                self.observer.launched(pseudo, handle, now)
