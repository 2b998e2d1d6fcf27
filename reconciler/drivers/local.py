"""No Slurm: allocations are records, steps are local process groups.

The process table is the source of truth for steps, as squeue is for Slurm: a
step is a launcher process (``/bin/sh -c <LAUNCHER> <step name> <status file> ...``)
whose status file lives under our state directory, and whose environment names
its allocation. So a reconciler killed between starting a process and writing
anything down still finds (and adopts) it. Allocations are records in
``state/local/allocs.json``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

from reconciler import labels
from reconciler.drivers.base import LAUNCHER, LAUNCHER_BEFORE, rotate, step_env, step_paths, wrapped_argv
from reconciler import fsutil
from reconciler.drivers.exits import ExitWatch
from reconciler.fsutil import atomic_write_text
from reconciler.world import Launch, Unit
from reconciler.world import Alloc, AllocSpec, Step

KILL_AFTER = 5.0  # seconds between SIGTERM and SIGKILL of a cancelled step
JOB_ENV = "RECONCILER_LOCAL_JOB"
_LAUNCHERS = (LAUNCHER.encode(), LAUNCHER_BEFORE.encode())  # this release's, and the one its steps may have


def step_id(job: str, pid: int, start: str) -> str:
    """A step id that grows with the launch, as Slurm's step numbers do (a worker's newest life is
    its newest step: core/slots.py): the start time (clock ticks since boot) first, then the pid.
    The pid alone wraps (pid_max 32768 here) and once made a surge life look older than the life
    it replaces, so the rollout stalled for good (found in a soak run)."""
    return f"{job}.{int(start):012d}{pid:07d}"


def _stat(pid: int) -> tuple[int, str] | None:
    """(parent pid, start time) of a live process; None for a zombie or one that is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            data = f.read()
    except OSError:
        return None
    fields = data.rsplit(")", 1)[1].split()
    if fields[0] == "Z":
        return None  # a zombie is gone for our purposes
    return int(fields[1]), fields[19]  # fields 4 and 22: ppid, starttime


def _is_allocs(d: object) -> bool:
    return isinstance(d, dict) and all(
        isinstance(k, str) and k.isdigit() and isinstance(v, dict)
        and isinstance(v.get("name"), str) and isinstance(v.get("comment"), str) for k, v in d.items())


def _is_cancelled(d: object) -> bool:
    return isinstance(d, dict) and all(
        isinstance(k, str) and k.isdigit() and isinstance(v, list) and len(v) == 2
        and isinstance(v[0], str) and isinstance(v[1], (int, float)) for k, v in d.items())


def _is_meta(d: object) -> bool:
    return isinstance(d, dict) and isinstance(d.get("last_job", 0), int)


_VALID = {"allocs": _is_allocs, "cancelled": _is_cancelled, "meta": _is_meta}


class LocalDriver:
    name = "local"

    def __init__(self, state_dir: Path, host: str | None = None, owner: str | None = None):
        self.state_dir = Path(state_dir)
        self.owner = owner or labels.default_owner(self.state_dir)
        self.dir = self.state_dir / "local"
        self.host = host or "localhost"
        self.commands = 0
        self._children: list[subprocess.Popen] = []
        self.exits = ExitWatch()

    # ---------------------------------------------------------------- records
    def _load(self, what: str, repair: bool = True) -> dict:
        """A record file; a corrupt or wrongly typed one reads as empty. ``repair``
        (every path that writes) moves it aside with a CorruptState event; observing
        alone never writes, so ``get`` and ``plan`` stay read-only."""
        from reconciler.drivers.state import StateDir

        return StateDir(self.state_dir, read_only=not repair).read_json(self.dir / f"{what}.json", {}, _VALID[what])

    def _save(self, what: str, data: dict) -> None:
        atomic_write_text(self.dir / f"{what}.json", json.dumps(data, indent=1, sort_keys=True) + "\n")

    def _processes(self) -> dict[str, tuple[int, str, str]]:
        """step id -> (pid, step name, start time) of our live launcher processes."""
        root = str(self.state_dir.absolute()) + os.sep
        found: dict[int, tuple[str, str, int, str]] = {}  # pid -> (job, step name, ppid, start)
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            pid = int(entry)
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                if len(cmd) < 5 or cmd[0] != b"/bin/sh" or cmd[2] not in _LAUNCHERS or not cmd[4].decode().startswith(root):
                    continue
                env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            except OSError:
                continue
            job = next((e.split(b"=", 1)[1].decode() for e in env if e.startswith(JOB_ENV.encode() + b"=")), "?")
            stat = _stat(pid)
            if stat is not None:
                found[pid] = (job, cmd[3].decode(), *stat)
        # the launcher forks (the worker before its exec, ``$(date)`` at exit): such a child has the
        # launcher's very command line for a moment, and is not a second step
        return {step_id(job, pid, start): (pid, name, start) for pid, (job, name, ppid, start) in found.items()
                if ppid not in found}

    # ---------------------------------------------------------------- observe
    def observe(self) -> tuple[list[Alloc], list[Step]]:
        self.commands += 2  # the equivalent of one job query and one step query
        allocs = []
        for job_id, rec in self._load("allocs", repair=False).items():
            lab = labels.parse_job(rec["name"], rec["comment"], self.owner)
            if lab:
                allocs.append(Alloc(job_id, lab.recipe, lab.index, lab.start, lab.count, "RUNNING", "None",
                                    tuple([self.host] * lab.count), submitted=_number(rec.get("submitted")),
                                    packed=lab.packed))
        procs = self._processes()
        steps = []
        recipes = labels.tags({a.recipe for a in allocs})
        for step_id, (_pid, name, _start) in procs.items():
            lab = labels.parse_step(name, self.owner, recipes)
            if lab:
                steps.append(Step(step_id, lab.recipe, lab.role, lab.index, lab.rank, lab.spec_hash, (self.host,), slot=lab.slot))
        return allocs, steps

    def _escalate(self, procs: dict[str, tuple[int, str, str]]) -> None:
        cancelled = self._load("cancelled")
        live = {str(pid): start for pid, _n, start in procs.values()}
        now, changed = time.time(), False
        for pid, (start, at) in list(cancelled.items()):
            if live.get(pid) != start:
                del cancelled[pid]
                changed = True
            elif now - at > KILL_AFTER:
                _killpg(int(pid), signal.SIGKILL)
        if changed:
            self._save("cancelled", cancelled)

    # ---------------------------------------------------------------- act
    def submit(self, spec: AllocSpec) -> str:
        self.commands += 1
        allocs = self._load("allocs")
        meta = self._load("meta")
        job_id = str(max([int(j) for j in allocs] + [int(meta.get("last_job", 0))]) + 1)
        allocs[job_id] = {
            "name": labels.job_name(self.owner, spec.recipe, spec.index),
            "comment": labels.job_comment(self.owner, spec.recipe, spec.index, spec.start, spec.count,
                                          packed=spec.packed),
            "submitted": time.time(),
        }
        self._save("meta", {**meta, "last_job": int(job_id)})
        self._save("allocs", allocs)
        return job_id

    def launch(self, job_id: str, unit: Unit, launch: Launch, step_name: str) -> None:
        """The process is in /proc the moment Popen returns: no handle to watch."""
        self.commands += 1
        paths = step_paths(self.state_dir, unit, launch)
        fsutil.private_dirs(paths.log.parent, self.state_dir)
        rotate(paths.log)
        # the recipe's environment in the launcher's environment (owner-readable), never in argv
        env = {**os.environ, JOB_ENV: job_id, **step_env(launch)}
        with fsutil.open_append(paths.log, self.state_dir) as out:
            # own session and process group: outlives us, and is cancelled as a group; the engine
            # gets the umask the reconciler was started with
            p = subprocess.Popen(wrapped_argv(launch, paths.status, step_name), stdin=subprocess.DEVNULL,
                                 stdout=out, stderr=subprocess.STDOUT, start_new_session=True, close_fds=True, env=env,
                                 umask=fsutil.user_umask())
        self._children.append(p)
        self.exits.watch(p.pid)  # its end wakes the loop

    def _cancel(self, pid: int, start: str) -> None:
        _killpg(pid, signal.SIGTERM)
        cancelled = self._load("cancelled")
        cancelled.setdefault(str(pid), [start, time.time()])
        self._save("cancelled", cancelled)

    def cancel_step(self, step_id: str) -> None:
        self.commands += 1
        proc = self._processes().get(step_id)
        if proc:
            self._cancel(proc[0], proc[2])

    def cancel_alloc(self, job_id: str) -> None:
        self.commands += 1
        for step_id, (pid, _n, start) in self._processes().items():
            if step_id.split(".", 1)[0] == job_id:
                self._cancel(pid, start)
        allocs = self._load("allocs")
        allocs.pop(job_id, None)
        self._save("allocs", allocs)

    def job_end(self, job_id: str) -> tuple[str, str] | None:
        return None  # the local driver keeps no record of an allocation it no longer holds

    def reap(self) -> None:
        """Collect finished children and SIGKILL cancelled steps that ignored SIGTERM (only a
        running controller does this: ``observe`` writes nothing)."""
        self._children = [p for p in self._children if p.poll() is None]
        self._escalate(self._processes())


def _number(v: object) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _killpg(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
