"""No Slurm: allocations are records, steps are local process groups.

Records live in ``state/local/`` so a restarted reconciler adopts what runs. A
step record holds the pid and its kernel start time, so a recycled pid is never
mistaken for our process.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

from reconciler import labels
from reconciler.drivers.base import rotate, step_paths, wrapped_argv
from reconciler.fsutil import atomic_write_text
from reconciler.units import Launch, Unit
from reconciler.world import Alloc, AllocSpec, Step

KILL_AFTER = 5.0  # seconds between SIGTERM and SIGKILL of a cancelled step


def _start_time(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            data = f.read()
    except OSError:
        return None
    fields = data.rsplit(")", 1)[1].split()
    if fields[0] == "Z":
        return None  # a zombie is gone for our purposes
    return fields[19]  # field 22: starttime


class LocalDriver:
    name = "local"

    def __init__(self, state_dir: Path, host: str | None = None):
        self.dir = Path(state_dir) / "local"
        self.state_dir = Path(state_dir)
        self.host = host or "localhost"
        self.commands = 0
        self._children: list[subprocess.Popen] = []

    # ---------------------------------------------------------------- records
    def _load(self, what: str) -> dict:
        try:
            return json.loads((self.dir / f"{what}.json").read_text())
        except (FileNotFoundError, ValueError):
            return {}

    def _save(self, what: str, data: dict) -> None:
        atomic_write_text(self.dir / f"{what}.json", json.dumps(data, indent=1, sort_keys=True) + "\n")

    def _alive(self, rec: dict) -> bool:
        return _start_time(rec["pid"]) == rec["start"]

    # ---------------------------------------------------------------- observe
    def observe(self) -> tuple[list[Alloc], list[Step]]:
        self.commands += 2  # the equivalent of one job query and one step query
        allocs = []
        for job_id, rec in self._load("allocs").items():
            lab = labels.parse_job(rec["name"], rec["comment"])
            if lab:
                allocs.append(Alloc(job_id, lab.recipe, lab.index, lab.start, lab.count, "RUNNING", "None",
                                    tuple([self.host] * lab.count)))
        steps_rec = self._load("steps")
        steps, changed, now = [], False, time.time()
        for step_id, rec in list(steps_rec.items()):
            if not self._alive(rec):
                del steps_rec[step_id]
                changed = True
                continue
            if rec.get("cancelled") and now - rec["cancelled"] > KILL_AFTER:
                self._signal(rec, signal.SIGKILL)
            lab = labels.parse_step(rec["name"])
            if lab:
                steps.append(Step(step_id, lab.recipe, lab.role, lab.index, lab.rank, lab.spec_hash, (self.host,)))
        if changed:
            self._save("steps", steps_rec)
        return allocs, steps

    # ---------------------------------------------------------------- act
    def submit(self, spec: AllocSpec) -> str:
        self.commands += 1
        allocs = self._load("allocs")
        nums = [int(j) for j in allocs] + [int(self._load("meta").get("last_job", 0))]
        job_id = str(max(nums, default=0) + 1)
        allocs[job_id] = {
            "name": labels.job_name(spec.recipe, spec.index),
            "comment": labels.job_comment(spec.recipe, spec.index, spec.start, spec.count),
            "submitted": time.time(),
        }
        self._save("meta", {"last_job": int(job_id)})
        self._save("allocs", allocs)
        return job_id

    def launch(self, job_id: str, unit: Unit, launch: Launch, step_name: str) -> None:
        self.commands += 1
        paths = step_paths(self.state_dir, unit, launch)
        paths.log.parent.mkdir(parents=True, exist_ok=True)
        rotate(paths.log)
        with open(paths.log, "ab") as out:
            p = subprocess.Popen(wrapped_argv(launch, paths.status), stdin=subprocess.DEVNULL, stdout=out,
                                 stderr=subprocess.STDOUT, start_new_session=True, close_fds=True)
        self._children.append(p)
        steps = self._load("steps")
        n = 1 + max((int(s.split(".")[1]) for s in steps if s.startswith(job_id + ".")), default=-1)
        n = max(n, int(self._load("meta").get(f"step_{job_id}", -1)) + 1)
        steps[f"{job_id}.{n}"] = {"name": step_name, "pid": p.pid, "start": _start_time(p.pid) or "", "job": job_id}
        meta = self._load("meta")
        meta[f"step_{job_id}"] = n
        self._save("meta", meta)
        self._save("steps", steps)

    def _signal(self, rec: dict, sig: int) -> None:
        if self._alive(rec):
            try:
                os.killpg(rec["pid"], sig)
            except ProcessLookupError:
                pass

    def cancel_step(self, step_id: str) -> None:
        self.commands += 1
        steps = self._load("steps")
        rec = steps.get(step_id)
        if rec is None:
            return
        self._signal(rec, signal.SIGTERM)
        rec["cancelled"] = time.time()
        self._save("steps", steps)

    def cancel_alloc(self, job_id: str) -> None:
        self.commands += 1
        steps = self._load("steps")
        for sid, rec in steps.items():
            if rec.get("job") == job_id:
                self._signal(rec, signal.SIGTERM)
                rec["cancelled"] = time.time()
        self._save("steps", steps)
        allocs = self._load("allocs")
        allocs.pop(job_id, None)
        self._save("allocs", allocs)

    def reap(self) -> None:
        self._children = [p for p in self._children if p.poll() is None]

