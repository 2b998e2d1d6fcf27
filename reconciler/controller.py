"""The imperative shell: read manifests and the world, plan, act, write status.

Level-triggered: every tick reads everything fresh (one job query, one step query,
probes, state/) and computes the plan from scratch; nothing is remembered between
ticks except launches still in flight (a step takes a moment to show in squeue),
per-recipe error backoff, and caches of derived data.
"""

from __future__ import annotations

import dataclasses
import os
import re
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from reconciler import labels
from reconciler.desired import build as build_desired
from reconciler.drivers import Driver, DriverError
from reconciler.drivers.base import Launched, step_log_paths
from reconciler.errors import RecipeError, ReconcilerError
from reconciler.fsutil import write_if_changed
from reconciler.health import HealthTracker
from reconciler.plan import CancelAlloc, CancelStep, LaunchStep, Plan, SubmitAlloc, plan, recipe_of
from reconciler.ports import NodePortAllocator
from reconciler.probe import probe_units
from reconciler.recipe.load import LoadedRecipe, iter_recipe_files, load_recipe, load_text
from reconciler.recipe.model import Recipe
from reconciler.state import StateDir, iso
from reconciler.status import build_status
from reconciler.units import FRONTEND, Unit, endpoints_path
from reconciler.world import Desired, DesiredRecipe, Observed, Step, UnitHealth

log = structlog.get_logger("reconciler")
BIND_FAILURE = re.compile(r"address already in use|EADDRINUSE|\[Errno 98\]", re.IGNORECASE)
INFLIGHT_GRACE = 20.0  # seconds a launched step may take to appear in squeue
CANCEL_GRACE = 30.0  # seconds a cancelled step may take to go before it is cancelled again
ACTIVE_INTERVAL = 0.5  # seconds between ticks while something is still converging


@dataclass
class Manifests:
    recipes: dict[str, Recipe] = field(default_factory=dict)  # what to converge to (last good spec when invalid)
    texts: dict[str, str] = field(default_factory=dict)  # name -> file text of valid recipes
    invalid: dict[str, str] = field(default_factory=dict)  # recipe name (or file stem) -> error message
    paths: dict[str, str] = field(default_factory=dict)  # file path -> recipe name
    files_seen: int = 0


@dataclass
class Snapshot:
    manifests: Manifests
    desired: Desired
    observed: Observed
    plan: Plan


class Controller:
    def __init__(self, manifests: Path, state: Path, driver: Driver, *, allow_empty: bool = False,
                 python: str | None = None, port_range: tuple[int, int] | None = None):
        self.manifests_dir = Path(manifests)
        self.state = StateDir(Path(state))
        self.driver = driver
        self.allow_empty = allow_empty
        self.python = python or sys.executable
        self.ports = self._load_ports()
        if port_range:
            self.ports.set_range(*port_range)
        self.cancelled: dict[str, float] = {}  # step id -> when we cancelled it (it may linger a moment)
        # step name -> (launched at, pseudo step, launcher handle): launches squeue does not show yet
        self.inflight: dict[str, tuple[float, Step, Launched]] = {}
        self.backoff: dict[str, tuple[float, float]] = {}  # recipe -> (retry at, current delay)
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._said: set[str] = set()
        self.tracker = HealthTracker(self.state.root)
        self._desired_cache: dict = {}
        self._logs_checked: set[tuple[str, int, int]] = set()  # (path, inode, size) already read for bind failures

    def _load_ports(self) -> NodePortAllocator:
        path = self.state.root / "ports.json"
        ports = NodePortAllocator.load(path)
        if not path.exists():
            # registry deleted: re-learn the ports running workers hold from their status rows
            for name in self.state.known_recipes():
                for row in self.state.status(name).get("workers", []):
                    for node in row.get("nodes", [])[:1]:
                        for port_name, port in row.get("ports", {}).items():
                            ports.claim(node, f"{name}/{row['name']}", port_name, int(port))
        return ports

    # ---------------------------------------------------------------- manifests
    def load_manifests(self) -> Manifests:
        m = Manifests()
        known = self.state.files()
        files = iter_recipe_files([self.manifests_dir]) if self.manifests_dir.is_dir() else []
        m.files_seen = len(files)
        for f in files:
            path = str(f)
            try:
                lr: LoadedRecipe = load_recipe(f)
            except RecipeError as e:
                name = known.get(path) or f.stem
                m.invalid[name] = str(e)
                m.paths[path] = name
                last = self.state.last_applied(name) if name in known.values() else None
                if last is not None and name not in m.recipes:
                    try:
                        m.recipes[name] = load_text(last, f"{path} (last applied)").recipe
                    except RecipeError:
                        pass
                continue
            name = lr.recipe.name
            if name in m.texts:
                other = next(p for p, n in m.paths.items() if n == name)
                m.invalid[name] = f"{path}: recipe name {name!r} is also used by {other}; this file is ignored"
                continue
            m.recipes[name] = lr.recipe
            m.texts[name] = f.read_text()
            m.paths[path] = name
        return m

    # ---------------------------------------------------------------- observe
    def observe(self) -> tuple[list, list[Step]]:
        allocs, steps = self.driver.observe()
        now = time.monotonic()
        live_ids = {s.step_id for s in steps}
        self.cancelled = {sid: at for sid, at in self.cancelled.items() if sid in live_ids and now - at < CANCEL_GRACE}
        steps = [dataclasses.replace(s, terminating=True) if s.step_id in self.cancelled else s for s in steps]
        seen = {labels.step_name(self.driver.owner, s.recipe, s.role, s.index, s.rank, s.spec_hash) for s in steps}
        for name, (at, pseudo, handle) in list(self.inflight.items()):
            if name in seen or now - at > INFLIGHT_GRACE:
                del self.inflight[name]
            elif handle.poll() is not None:
                # the launcher exited before the step ever showed up: the launch failed
                del self.inflight[name]
                tail = _tail(step_log_paths(self.state.root, pseudo.recipe, f"{pseudo.role}_{pseudo.index}", pseudo.rank).srun)
                log.error("launch failed", step=name, exit=handle.poll(), output=tail)
                self.state.event("LaunchFailed", pseudo.recipe, f"{name}: launcher exited {handle.poll()}: {tail}")
            else:
                steps.append(pseudo)
        return allocs, steps

    def snapshot(self) -> Snapshot:
        m = self.load_manifests()
        allocs, steps = self.observe()
        self._port_conflicts(steps)
        pre = Observed(tuple(allocs), tuple(steps))
        desired = build_desired(m.recipes, pre, self.ports, self.state.root, self.python, m.files_seen,
                                self._desired_cache)
        units = [u for d in desired.recipes.values() for u in _all_units(d)]
        running = {s.unit_key for s in steps if not s.pending}
        ready = probe_units([u for u in units if u.key in running])
        now = time.time()
        health = self._health(desired, units, running, ready, now)
        observed = Observed(tuple(allocs), tuple(steps), ready, health)
        return Snapshot(m, desired, observed, plan(desired, observed, now, self.allow_empty))

    def _port_conflicts(self, steps: list[Step]) -> None:
        """A worker that died because its port was taken by a process we do not own gets new
        ports (the taken ones are blocked on that node), instead of crash-looping on them."""
        running = {f"{s.recipe}/{s.role}_{s.index}" for s in steps}
        checked, self._logs_checked = self._logs_checked, set()
        for owner in sorted(self.ports.owners() - running):
            recipe, unit = owner.split("/", 1)
            logs = self.state.recipe_dir(recipe) / "logs"
            for log_path in logs.glob(f"{unit}.*.log") if logs.is_dir() else ():
                try:
                    st = os.stat(log_path)
                except OSError:
                    continue
                mark = (str(log_path), st.st_ino, st.st_size)
                self._logs_checked.add(mark)  # a log that did not change is not read again next tick
                if mark in checked or not BIND_FAILURE.search(_tail(log_path, 8192)):
                    continue
                held = self.ports.held_by(owner)
                for node, ports in held.items():
                    for port in ports.values():
                        self.ports.block(node, port)
                self.ports.release(owner)
                self._desired_cache.pop(recipe, None)
                taken = ", ".join(f"{n}:{p}" for n, ps in held.items() for p in ps.values())
                log.warning("port conflict: new ports for the worker", recipe=recipe, unit=unit, ports=taken)
                self.state.event("PortConflict", recipe, f"{unit} could not bind ({taken}): another process holds "
                                 "it; the worker gets new ports and those are avoided for an hour")
                break

    def _health(self, desired: Desired, units: list[Unit], running: set, ready: dict, now: float) -> dict:
        """Per worker: lives and exits from state/, probe history and fatal log lines from the tracker."""
        out: dict[tuple[str, str, int], UnitHealth] = {}
        records = {name: self.state.launches(name) for name in desired.recipes}
        for u in units:
            rec = records[u.recipe].get(u.name, {})
            last_exit = None
            if u.key in running:
                self.tracker.seen_running(u.key)
                self.tracker.probed(u.key, bool(ready.get(u.key)), now)
                self.tracker.scan_logs(u)
                missing = None
            else:
                missing = self.tracker.seen_missing(u.key, now) if rec.get("launches") else None
                last_exit = self.state.exit_status(u.recipe, u.name) if rec.get("launches") else None
            life = self.tracker.life(u.key)
            out[u.key] = UnitHealth(
                launches=rec.get("launches", 0), restarts=rec.get("backoff", 0), last_launch=rec.get("lastLaunch"),
                last_exit=last_exit, missing_since=missing,
                replacing=bool(rec.get("replace")), was_ready=life.was_ready, probe_failures=life.probe_failures,
                fatal=life.fatal, watched_since=life.watched_since,
            )
        return out

    # ---------------------------------------------------------------- act
    def execute(self, p: Plan) -> list[str]:
        """Run the plan's actions; a failing recipe backs off, the others go on."""
        done: list[str] = []
        failed: set[str] = set()
        now = time.monotonic()
        for a in p.actions:
            recipe = recipe_of(a)
            if recipe in failed:
                continue
            retry_at, _ = self.backoff.get(recipe, (0.0, 0.0))
            if retry_at > now:
                continue
            try:
                self._do(a)
                done.append(a.describe())
                log.info(a.describe())
                self.state.event(type(a).__name__, recipe, a.describe())
            except (DriverError, OSError) as e:
                failed.add(recipe)
                _, delay = self.backoff.get(recipe, (0.0, 0.0))
                delay = min(max(2.0, delay * 2), 300.0)
                self.backoff[recipe] = (now + delay, delay)
                log.error("action failed", recipe=recipe, action=a.describe(), error=str(e), retry_in=f"{delay:g}s")
                self.state.event("ActionFailed", recipe, f"{a.describe()}: {e}", retry_in=delay)
        for recipe in {r for r in self.backoff if r not in failed}:
            if self.backoff[recipe][0] <= now:
                del self.backoff[recipe]
        return done

    def _do(self, a) -> None:
        if isinstance(a, CancelStep):
            self.driver.cancel_step(a.step_id)
            self.cancelled[a.step_id] = time.monotonic()
            if a.replace:
                self.state.mark_replace(a.recipe, a.unit)
        elif isinstance(a, CancelAlloc):
            self.driver.cancel_alloc(a.job_id)
        elif isinstance(a, SubmitAlloc):
            self.driver.submit(a.spec)
        elif isinstance(a, LaunchStep):
            u, l = a.unit, a.launch
            for path, content in u.files.items():
                write_if_changed(Path(path), content)
            name = labels.step_name(self.driver.owner, u.recipe, u.role, u.index, l.rank, u.spec_hash)
            handle = self.driver.launch(a.job_id, u, l, name)
            if l.rank == 0:
                self.state.count_launch(u.recipe, u.name, time.time())
                self.tracker.new_life(u.key)
            if handle is not None:
                pseudo = Step(f"{a.job_id}.pending-{u.name}-{l.rank}", u.recipe, u.role, u.index, l.rank,
                              u.spec_hash, l.nodes, pending=True)
                self.inflight[name] = (time.monotonic(), pseudo, handle)

    # ---------------------------------------------------------------- one tick
    def tick(self) -> tuple[Snapshot, list[str]]:
        self.driver.reap()
        snap = self.snapshot()
        done = self.execute(snap.plan)
        self._bookkeeping(snap)
        return snap, done

    def _bookkeeping(self, snap: Snapshot) -> None:
        m, d, o = snap.manifests, snap.desired, snap.observed
        for name, text in m.texts.items():
            self.state.write_last_applied(name, text)
        self.state.write_files(m.paths)
        # ports: keep those of desired units and of anything still running
        if not snap.plan.refused_prune:
            live = {f"{u.recipe}/{u.name}" for dr in d.recipes.values() for u in _all_units(dr)}
            live |= {f"{dr.name}/{role}_{i}" for dr in d.recipes.values() for (role, i) in dr.waiting}
            live |= {f"{s.recipe}/{s.role}_{s.index}" for s in o.steps}
            for owner in self.ports.owners() - live:
                self.ports.release(owner)
        self.ports.save(self.state.root / "ports.json")
        for dr in d.recipes.values():
            self._write_endpoints(dr, o)
        for name, why in d.held.items():
            prev = self.state.status(name)
            if prev.get("error") != why:
                log.error("recipe held", recipe=name, error=why)
                self.state.event("Held", name, f"desired state cannot be computed, nothing is changed: {why}")
            self.state.write_status(name, {**prev, "name": name, "phase": "Error", "error": why,
                                           "updatedAt": iso(time.time())})
        names = set(d.recipes) | set(m.invalid)
        for name in names:
            prev = self.state.status(name)
            records = self.state.launches(name)
            st = build_status(name, d.recipes.get(name), o, snap.plan, m.invalid.get(name), prev,
                              records, time.time(), self.state.exits(name))
            for cond in st["conditions"]:
                old = next((c for c in prev.get("conditions", []) if c["type"] == cond["type"]), None)
                if old is None or old["status"] != cond["status"]:
                    self.state.event("Condition", name, f"{cond['type']}={cond['status']}: {cond['message']}",
                                     reason=cond["reason"])
            self.state.write_status(name, st)
            dr = d.recipes.get(name)
            if dr is not None:
                self.state.prune_launches(name, {f"{r}_{i}" for r, i in dr.unit_keys} | {f"{FRONTEND}_0"})
                # a worker healthy for reset_after_seconds starts its backoff from scratch again
                for u in _all_units(dr):
                    life = self.tracker.lives.get(u.key)
                    if (records.get(u.name, {}).get("backoff") and life and life.ready_since
                            and time.time() - life.ready_since >= dr.policy(u.role).reset_after_seconds):
                        self.state.reset_backoff(name, u.name)
        for name in self.state.known_recipes():
            if name not in names and name not in d.held and not o.steps_of(name) and not o.allocs_of(name):
                st = self.state.status(name)
                if st.get("phase") != "Deleted":
                    self.state.event("Deleted", name, "recipe removed and everything it owned is gone")
                    self.state.write_status(name, {**st, "phase": "Deleted", "deletedAt": iso(time.time()),
                                                   "workers": []})
                    self.state.prune_launches(name, set())

    def _write_endpoints(self, d: DesiredRecipe, o: Observed) -> None:
        if d.frontend is None:
            return  # only the builtin router reads an endpoints file
        workers = [
            {"url": u.url, "role": u.role, "name": u.name, "node": u.nodes[0]}
            for u in d.units if o.ready.get(u.key)
        ]
        self.state.write_json(endpoints_path(self.state.root, d.name), {"recipe": d.name, "workers": workers})

    # ---------------------------------------------------------------- the loop
    def lock(self) -> None:
        """One controller per state directory: two would fight over the same workloads."""
        import fcntl
        import os

        self.state.root.mkdir(parents=True, exist_ok=True)
        path = self.state.root / "run.lock"
        self._lock = open(path, "a+")  # noqa: SIM115 - held for the life of the controller
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock.seek(0)
            holder = self._lock.read().strip() or "?"
            raise ReconcilerError(
                f"another reconciler (pid {holder}) is running on {self.state.root.absolute()}; stop it first"
            ) from None
        self._lock.seek(0)
        self._lock.truncate()
        self._lock.write(f"{os.getpid()}\n")
        self._lock.flush()

    def run(self, resync: float = 5.0, once: bool = False) -> None:
        self.lock()
        watcher = None
        if not once:
            watcher = threading.Thread(target=self._watch, name="manifest-watch", daemon=True)
            watcher.start()
        while not self._stop.is_set():
            self._wake.clear()
            wait = resync
            try:
                snap, done = self.tick()
                # a note is logged when it first appears, not again each tick (countdowns aside)
                keys = {_note_key(n): n for n in snap.plan.notes}
                for k, n in keys.items():
                    if k not in self._said:
                        log.info(n)
                self._said = set(keys)
                if done or snap.plan.actions or not _settled(snap):
                    # converging: look again soon instead of waiting a full resync
                    wait = min(resync, ACTIVE_INTERVAL)
            except Exception as e:  # noqa: BLE001 - the loop must survive anything and retry
                log.exception("tick failed", error=str(e))
            if once:
                break
            self._wake.wait(wait)
        log.info("controller stopped; workloads keep running")

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


def _note_key(note: str) -> str:
    return re.sub(r"\d+s\b", "Ns", note)


def _tail(path: Path, limit: int = 400) -> str:
    try:
        return path.read_text(errors="replace")[-limit:].strip()
    except OSError:
        return ""


def _settled(snap: Snapshot) -> bool:
    """Every desired worker runs and is Ready: nothing to watch closely."""
    for d in snap.desired.recipes.values():
        if d.suspended:
            continue
        if d.waiting:
            return False
        for u in _all_units(d):
            if not snap.observed.ready.get(u.key):
                return False
    return True


def _all_units(d: DesiredRecipe) -> list[Unit]:
    return list(d.units) + ([d.frontend] if d.frontend else [])


__all__ = ["Controller", "Snapshot", "FRONTEND"]
