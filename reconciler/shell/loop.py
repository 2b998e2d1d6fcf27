"""The controller: one tick = facts -> desired -> plan -> execute -> record; the loop runs ticks.

Level-triggered: every tick reads everything fresh and plans from scratch. The loop
sleeps until the plan's ``requeue_after``, a manifest file event, or the resync —
whichever comes first. ``snapshot()`` alone (``get``, ``plan``) writes nothing.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
from collections import Counter
import time
from pathlib import Path

import structlog

from reconciler.recipe import namespaces
from reconciler.recipe.cluster import Cluster
from reconciler.core.plan import CancelAlloc, Plan, plan
from reconciler.core.portplan import reassign_after_bind_failures, release_unused
from reconciler.desired.build import build as build_desired
from reconciler.drivers import Driver
from reconciler.fsutil import atomic_write_text
from reconciler.core.ports import NodePortAllocator
from reconciler.shell.elastic.autoscale import Autoscaler
from reconciler.shell.execute import Executor
from reconciler.shell.readiness import canary
from reconciler.shell.readiness.router_sync import RouterSync
from reconciler.shell.gateway import holder_supervisor
from reconciler.shell.gateway.record import OWNER_NAME, record_path
from reconciler.shell.gateway.host import Gateways
from reconciler.shell.gateway.job import GatewayJobs
from reconciler.shell.gateway.answering import GatewayProbe
from reconciler.shell.gateway.sync import sync_gateways
from reconciler.shell.manifests import DEBOUNCE, Manifests, applied_since, load_manifests
from reconciler.shell.cluster_config import ClusterConfigWatch
from reconciler.shell.observe import Observer
from reconciler.shell.record import record
from reconciler.shell import renames
from reconciler.shell import prune_guard
from reconciler.shell.snapshot import Snapshot
from reconciler.shell.metrics import Metrics
from reconciler.shell.cluster.nodes import NodeWatch
from reconciler.shell.cluster.lost_allocs import LostAllocations
from reconciler.shell.cluster.slurm_watch import SlurmWatch
from reconciler.drivers.state import StateDir, suspended_names
from reconciler.shell.tick_health import TickHealth
from reconciler.shell.lease import Lease, LeaseLost, wait_for_lease
from reconciler.timefmt import iso
from reconciler.world import Observed
from reconciler.desired.sources.benchmark import ROLE as BENCHMARK_ROLE
from reconciler.shell.gates.bench_results import Announcer
from reconciler.shell.gates.analysis_runs import Analyzer

log = structlog.get_logger("reconciler")
TICK_BACKOFF_MAX = 60.0  # seconds between attempts when whole ticks keep failing (e.g. squeue is down)
ONE_SHOT_CANARY_WAIT = canary.CANARY_TIMEOUT + 1.0  # get, plan, run --once: the whole canary (its own bound)


class Controller:
    def __init__(self, manifests: Path, state: Path, driver: Driver, *, allow_empty: bool = False,
                 python: str | None = None, port_range: tuple[int, int] | None = None, read_only: bool = False,
                 cluster: Cluster | None = None):
        self.manifests_dir = Path(manifests)
        self.state = StateDir(Path(state), read_only=read_only)
        self.driver = driver
        self.allow_empty = allow_empty
        self.cluster = cluster
        self.cluster_watch = ClusterConfigWatch(self.state, cluster)  # srtslurm.yaml, looked at again each pass of run
        self.python = python or sys.executable
        self.ports = self._load_ports()
        if port_range:
            self.ports.set_range(*port_range)
        self.observer = Observer(self.state, driver)
        if read_only:  # get, plan: one pass, nobody reads a canary's answer later
            self.observer.canary_wait = ONE_SHOT_CANARY_WAIT
        self.executor = Executor(self.state, driver, self.observer)
        self.nodes = NodeWatch(self.state, driver)  # suspect nodes after a node failure
        self.lost = LostAllocations(self.state, driver, self.nodes)  # allocations lost without our scancel
        self.slurm = SlurmWatch(self.state, driver)  # reservations, pending explanations, quarantine
        self.autoscaler = Autoscaler(self.state)  # reconcile.autoscale: counts per role, kept in state/
        # the deployments' gateways (nginx on this host); a master that exits wakes the loop
        self.gateways = None if read_only else Gateways(self.state, wake=self._wake_soon)
        if self.gateways is not None:  # reconcile.gateway.allocation: a gateway in its own Slurm job
            self.gateways.jobs = GatewayJobs(self.state, driver, self.gateways.nginx,
                                             door_memory=self.gateways.door_memory)
        self.gateway_probe = GatewayProbe()  # each running gateway asked end to end, at its pace
        self.routers = RouterSync()  # the routers' worker sets (what was POSTed lately)
        exits = getattr(driver, "exits", None)  # a launched step's end wakes the loop (drivers/exits.py)
        if exits is not None and not read_only:
            exits.wake = self._wake_soon
        self.metrics: Metrics | None = None  # run --metrics-addr
        self.bench_events = Announcer(time.time())  # an event per finished benchmark run
        self._bench_runs: dict[str, dict] = {}  # recipe -> its last benchmark run (for the metrics)
        self.analyzer = Analyzer(self.state, time.time())  # reconcile.rollout.analysis: the measurements
        self.ui = None  # run --ui-addr: reconciler.ui.StatusUI, handed each tick's result
        self.ticks = 0
        self.actions_done = 0
        self.tick_failures = 0  # in a row
        self.health = TickHealth(self.state)
        self.lease = Lease(self.state.root)  # run.lock: held by run, touched after each pass
        self.executor.fence = self.keep_lock  # before each action: a standby may have taken over
        self.last_error = ""
        # get / plan show the files as they are now; only run waits for an edit to settle
        self.debounce = 0.0 if read_only else DEBOUNCE
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._said: set[str] = set()
        self._desired_cache: dict = {}
        self._applied: dict[str, tuple[str, tuple, float]] = {}  # recipe -> (text, counts, since when)
        self._manifest_cache: dict = {}  # path -> (stat signature, what it loaded)
        self._skipped: dict[str, str] = {}  # entries passed over, as last reported
        self._gone: dict[str, float] = {}  # applied file -> when first seen missing (a save may recreate it)
        self.single_pass = False  # run --once: no later pass will look again
        self.clock = time.time  # the loop's clock and its way to wait (a test drives both)
        self.sleep = self._wake.wait

    def _wake_soon(self) -> None:
        self._wake.set()

    def _load_ports(self) -> NodePortAllocator:
        path = self.state.root / "ports.json"
        data = self.state.read_json(path, None, lambda d: isinstance(d, dict))
        if data is not None:
            try:
                return NodePortAllocator.from_dict(data)
            except (ValueError, TypeError, AttributeError) as e:
                self.state.corrupt(path, f"{type(e).__name__}: {e}", None)
        # registry missing or corrupt: re-learn the ports running workers hold from their status rows
        ports = NodePortAllocator()
        for name in self.state.known_recipes():  # the gateways' first: their addresses are promised
            gw = self.state.read_json(record_path(self.state.root, name), {}, lambda d: isinstance(d, dict))
            for port_name, key in (("http", "port"), (holder_supervisor.NAME, "holderPort")):
                if isinstance(gw.get(key), int) and isinstance(gw.get("host"), str):
                    ports.claim(gw["host"], f"{name}/{OWNER_NAME}", port_name, gw[key])
        for name in self.state.known_recipes():
            for unit, rec in self.state.launches(name).items():  # the ports of each current life
                for node, held in (rec.get("ports") or {}).items():
                    for port_name, port in held.items() if isinstance(held, dict) else ():
                        if isinstance(port, int):
                            ports.claim(node, f"{name}/{unit}", port_name, port)
            for row in self.state.status(name).get("workers", []):
                for node in row.get("nodes", [])[:1]:
                    for port_name, port in (row.get("ports") or {}).items():
                        try:
                            ports.claim(node, f"{name}/{row['name']}", port_name, int(port))
                        except (KeyError, TypeError, ValueError):
                            continue  # a row we cannot read: that worker gets ports anew
        return ports

    def load_manifests(self, now: float | None = None) -> Manifests:
        if not self.state.read_only:  # run: a rewritten cluster config is put in force (or refused)
            self.cluster = self.cluster_watch.refresh()
        # a file gone for a moment (an editor's save) waits for a next pass; run --once has none
        m = load_manifests(self.manifests_dir, self.state, now, self.debounce, self.cluster, self._manifest_cache,
                           self._gone if self.debounce > 0 and not self.single_pass else None)
        # a file whose name: changed: the old deployment held until the new one takes its endpoint
        renames.apply(m, self.state, self.cluster, self.clock() if now is None else now,
                      self.gateways.host if self.gateways is not None else None)
        return m

    # ---------------------------------------------------------------- one read of the world
    def snapshot(self) -> Snapshot:
        now = self.clock()
        m = self.load_manifests(now)
        ports = self.ports.copy(now)
        facts = self.observer.cluster(ports, now)
        reassigned = reassign_after_bind_failures(ports, facts.bind_failures, now)
        pre = Observed(facts.allocs, facts.steps)
        # a file that cannot be loaded, with no usable last spec: what runs under its names is
        # left alone (held), never mistaken for a deleted recipe
        unusable = {n: f"its file cannot be loaded and there is no usable last applied spec: {why.splitlines()[0]}"
                    for n, why in m.invalid.items() if n not in m.recipes}
        desired = build_desired(m.recipes, pre, ports, self.state.root, self.python, m.files_seen,
                                self._desired_cache, self.allow_empty, hold=unusable,
                                suspended=suspended_names(self.state.root),
                                scale=self.autoscaler.overrides(m.recipes, now))
        # every manifest gone at once: what the prune guard keeps is built from its last applied spec
        # to be probed and shown, and `reconciler prune NAME` confirms one's teardown
        desired = prune_guard.hold(desired, pre, self.state, ports, self.python, self.cluster, now)
        ready, health = self.observer.health(prune_guard.probed(desired), facts.steps, now)
        previous_ready, previous_failures = self.observer.previous_ready(desired, facts.steps)
        self.slurm.refresh(facts.allocs, desired, now)  # the slow questions, only when due
        observed = Observed(facts.allocs, facts.steps, ready, health, dict(self.executor.failures),
                            previous_ready,
                            self.slurm.deadlines(facts.allocs, desired, self.nodes.excluded(), now),
                            self.slurm.pending(facts.allocs),
                            why={k: w for k, w in self.observer.probes.canaries.why.items() if not ready.get(k)},
                            previous_failures=previous_failures, analysis=self.analyzer.facts(desired, facts.steps))
        p = plan(desired, observed, now, applied_since(self.state, m, self._applied, now))
        release_unused(ports, desired, observed, p.refused_prune)
        # "<recipe>/<unit>[@life]" (a namespaced recipe has an "@" of its own): the unit, not its life
        bind_failed = frozenset(f"{r}/{u.split('@', 1)[0]}" for r, _, u in (o.partition("/") for o in facts.bind_failures))
        return Snapshot(m, desired, observed, p, ports, reassigned, facts.failed_launches, now, bind_failed)

    # ---------------------------------------------------------------- one tick
    def enable_metrics(self, addr: str, token: str | None = None) -> None:
        self.metrics = Metrics()
        self.executor.on_action = self.metrics.action
        self.metrics.serve(addr, token)

    def tick(self) -> tuple[Snapshot, list]:
        t0 = time.monotonic()
        self.driver.reap()
        snap = self.snapshot()
        self.keep_lock()  # fenced: a standby takes over from a pass stopped or hung past the lease term
        self.ports = snap.ports  # this tick's assignment is the registry from now on
        self._report_skipped(snap.manifests.skipped)
        self.lost.cancelled |= self.nodes.release_requeued(self.lost.live, snap.observed.allocs, snap.now)
        self.lost.note(snap)
        self.nodes.tick(snap.now)
        self.executor.exclusion = lambda spec: self.slurm.exclude_for(spec, self.nodes.exclusion_for(spec), snap.now)
        self.executor.hold = lambda spec: self.nodes.hold_submission(spec, snap.now)
        wished = {*self.nodes.excluded(), *self.slurm.quarantined, *(n for r in self.slurm.reservations for n in r.nodes)}
        self.lost.cancelled |= self.nodes.release_stale(snap.observed.allocs, self.executor.submitted_excluding, wished)
        done = self.executor.execute(snap.plan)
        self.lost.cancelled |= {a.job_id for a in done if isinstance(a, CancelAlloc)}
        self.slurm.failures(done, snap.observed, [f.step for f in snap.failed_launches], snap.desired, snap.now,
                            snap.bind_failed)
        self.slurm.note(snap.observed.pending, snap.observed.deadlines, snap.observed.allocs, snap.now)
        self.keep_lock()
        if self.gateways is not None:
            sync_gateways(self.state, self.gateways, snap, self.gateway_probe)  # before ports.json: a first gateway takes a port
        record(self.state, snap, self.routers)
        self.analyzer.tick(snap.plan, snap.desired)  # after record: the routers never had the life it measures
        if self.autoscaler.after_tick(snap):
            self._wake.set()  # a count changed or a victim left the routers: the next tick acts on it
        self._bench_runs = self.bench_events.tick(self.state, [n for n, d in snap.desired.recipes.items()
                                                               if d.restart.get(BENCHMARK_ROLE)])
        self.ticks += 1
        self.actions_done += len(done)
        self._write_progress(snap.now)
        self.lease.beat()
        if self.metrics is not None:
            self._observe(snap, done, time.monotonic() - t0)
        if self.ui is not None:
            try:
                self.ui.on_tick(self, snap)
            except Exception as e:  # noqa: BLE001 - the status page never stops the loop
                log.warning("status page: cannot build the page", error=f"{type(e).__name__}: {e}")
        return snap, done

    def _report_skipped(self, skipped: dict[str, str]) -> None:
        """A *.yaml entry that is no file is passed over; said once (and again if it changes)."""
        for path, what in skipped.items():
            if self._skipped.get(path) != what:
                log.warning("manifest entry skipped", path=path, what=what)
                self.state.event("FileSkipped", None, f"{path}: {what}, not a recipe file; skipped")
        self._skipped = dict(skipped)

    def _observe(self, snap: Snapshot, done: list, seconds: float) -> None:
        phases = {n: self.state.status(n).get("phase", "Unknown") for n in snap.plan.recipes}
        restarts: dict[tuple[str, str], int] = {}
        for name in snap.desired.recipes:
            for unit, rec in self.state.launches(name).items():
                key = (name, unit.rsplit("_", 1)[0])
                restarts[key] = restarts.get(key, 0) + int(rec.get("restarts", 0))
        self.metrics.observe_tick(snap, done, seconds, getattr(self.driver, "tally", Counter()), phases,  # type: ignore[union-attr]
                                  restarts)
        self.metrics.benchmarks(self._bench_runs)  # type: ignore[union-attr]
        self.metrics.conditions({n: self.state.status(n).get("conditions") or [] for n in snap.plan.recipes})  # type: ignore[union-attr]
        self.metrics.startups({n: self.autoscaler.startup.summary(n) for n in snap.desired.recipes})  # type: ignore[union-attr]

    def _write_progress(self, now: float) -> None:
        """state/controller.json: ticks and actions so far — what tests and operators watch.
        ``lastTick`` is the last pass, failed or not; ``lastError`` is set while passes fail."""
        data = {"pid": os.getpid(), "host": socket.gethostname(), "ticks": self.ticks, "actions": self.actions_done,
                "tickFailures": self.tick_failures, "lastTick": iso(now)}
        if self.tick_failures:
            data["lastError"] = self.last_error
        atomic_write_text(self.state.root / "controller.json", json.dumps(data) + "\n")

    # ---------------------------------------------------------------- the loop
    def lock(self) -> None:
        """One controller per state directory: two would fight over the same workloads."""
        self.lease.acquire()

    def keep_lock(self) -> None:
        """The lock file removed under us (``rm -rf state/*``) is made and locked again at once. Should
        another ``run`` hold the new file (or a standby have seized the lease from this one, stopped
        or hung past the term: shell/lease.py), this one stops (leaving every workload running) and
        acts on nothing more: two would fight."""
        try:
            remade = self.lease.keep()
        except LeaseLost as e:
            log.error("another reconciler holds the state directory now; stopping", error=str(e))
            self.stop()
            raise
        if remade:
            log.warning("state/run.lock was removed; made and locked again")
            self.state.event("LockRecreated", None, "state/run.lock was removed under the running reconciler; "
                             "it is made and locked again")

    def run(self, resync: float = 5.0, once: bool = False, on_locked=None, standby: bool = False) -> None:
        """``standby``: another reconciler holds the state directory: wait and take over when it ends."""
        if not standby:
            self.lock()
        elif not wait_for_lease(self.lock, self.state.root, self._stop.is_set, self._stop.wait,
                                seize=self.lease.seize, term=self.lease.term):
            log.info("standby stopped before taking over")
            return
        if on_locked is not None:
            on_locked()  # e.g. record run's settings: only the reconciler holding the lock may
        self.single_pass = once
        if once:
            self.observer.canary_wait = ONE_SHOT_CANARY_WAIT
        if not once:
            threading.Thread(target=self._watch, name="manifest-watch", daemon=True).start()
            threading.Thread(target=self.cluster_watch.watch, args=(self._stop, self._wake.set), name="cluster-config-watch",
                             daemon=True).start()
        while not self._stop.is_set():
            self._wake.clear()
            wait = resync
            wait = self.step(resync)
            if once or self._stop.is_set():
                break
            self.sleep(wait)
        log.info("controller stopped; workloads keep running")

    def step(self, resync: float) -> float:
        """One pass of the loop, which survives anything; returns how long to wait for the next."""
        self.keep_lock()  # raises (and the loop ends) when another reconciler took the state directory
        try:
            snap, _done = self.tick()
        except LeaseLost:
            raise  # acts on nothing more, writes nothing more
        except Exception as e:  # noqa: BLE001 - the loop must survive anything and retry
            self.tick_failures += 1
            self.last_error = f"{type(e).__name__}: {e}"
            wait = min(2.0 ** (self.tick_failures - 1), TICK_BACKOFF_MAX)
            log.exception("tick failed", error=self.last_error, failures=self.tick_failures, retry_in=f"{wait:g}s")
            now = self.clock()
            self.keep_lock()  # a failed pass of a controller that lost the lease records nothing
            self.health.failed(e, self.tick_failures, now)
            if self.metrics is not None:
                self.metrics.tick_failed(getattr(self.driver, "tally", Counter()))
            try:
                self._write_progress(now)
            except OSError as w:
                log.error("cannot write state/controller.json", error=str(w))
            self.lease.beat()  # a failing pass is a pass: a standby would fail the same way
            return min(wait, self.lease.term / 3)
        if self.tick_failures:
            self.tick_failures = 0
            self.health.succeeded(snap.now)
            self._write_progress(snap.now)
        self._log_waiting(snap.plan)
        wait = next_wait(snap, resync)
        due = self.gateways.next_due(snap.now) if self.gateways else None  # a gateway's restart backoff
        scale = self.autoscaler.next_due()  # the autoscaler's next look at the metrics
        if scale is not None:
            wait = min(wait, max(0.05, scale - snap.now))
        wait = min(wait, self.lease.term / 3)  # the heartbeat well within the lease term
        return wait if due is None else min(wait, max(0.05, due))

    def _log_waiting(self, p: Plan) -> None:
        """A wait is logged when it first appears (or its reason changes), not again each tick."""
        keys: dict[tuple, str] = {}
        for name, rp in p.recipes.items():
            for unit, w in rp.waiting.items():
                keys[(name, unit, w.reason)] = f"{namespaces.display(name)}: {unit} {w.describe()}"
            if rp.detail or rp.deferred:
                keys[(name, rp.state, bool(rp.deferred))] = "; ".join(rp.describe_waiting()[:1])
        for k, line in keys.items():
            if k not in self._said:
                log.info(line)
        self._said = set(keys)

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def _watch(self) -> None:
        import watchfiles

        self.manifests_dir.mkdir(parents=True, exist_ok=True)
        try:
            for _changes in watchfiles.watch(self.manifests_dir, debounce=200, step=50, stop_event=self._stop,
                                             yield_on_timeout=False, raise_interrupt=False):
                self._wake.set()
        except Exception as e:  # noqa: BLE001 - resync still converges without the watcher
            log.warning("manifest watcher stopped; relying on resync", error=str(e))


def next_wait(snap: Snapshot, resync: float) -> float:
    """The earliest of the plan's requeue_after, the resync, and edited files settling (Slurm's queue: plan's recheck)."""
    wait = resync if snap.plan.requeue_after is None else min(resync, snap.plan.requeue_after)
    if snap.manifests.settling:
        wait = min(wait, max(0.05, min(snap.manifests.settling.values()) - snap.now))
    return wait


__all__ = ["Controller", "Snapshot", "next_wait"]
