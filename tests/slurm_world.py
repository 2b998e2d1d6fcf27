"""The real Slurm driver (``reconciler.drivers.slurm.SlurmDriver``) in front of a Slurm held in memory.

Every command the driver issues goes through its own ``_run`` (squeue, sbatch, scancel,
scontrol) or ``launch`` (srun) and is recorded here as the argv it built; the answers are
text in the shape the real commands print (squeue's ``-O``/``-o`` lines with the driver's
separator, a ``<job>.batch`` step per job, a job of the same user that is not the
reconciler's, ``sbatch --parsable``'s id), so the driver's own parsers read them. What is
counted is what would run on a login node, not how often the loop calls ``observe``.

Used by tests/test_polling.py and benchmarks/plan_scale.py (commands per observation at 1
and at 50 recipes). Nothing runs: an srun is recorded and its step listed at once.
"""

from __future__ import annotations

import itertools
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from reconciler import hostlist
from reconciler.drivers.base import step_paths, wrapped_argv
from reconciler.drivers.slurm import JOB_FIELDS, SEP, SlurmDriver, srun_argv
from reconciler.world import Launch, Unit

FOREIGN = "4242"  # the user's own interactive job: squeue -u lists it, the reconciler must leave it


class RecordingSlurm(SlurmDriver):
    """``argvs`` holds every command, in order. Allocations run at once on ``nodes`` unless
    ``alloc_state`` says otherwise (PENDING with ``reason``, submitted ``queued_for`` s before the clock)."""

    def __init__(self, state_dir: Path, clock: Callable[[], float] = time.time, alloc_state: str = "RUNNING",
                 reason: str = "None", queued_for: float = 0.0, nodes: tuple[str, ...] = ("node01",),
                 user: str = "alice", owner: str = "test"):
        super().__init__(state_dir, user=user, owner=owner)
        self.clock, self.alloc_state, self.reason, self.queued_for = clock, alloc_state, reason, queued_for
        self.nodes = nodes
        self.argvs: list[list[str]] = []
        self.jobs: dict[str, dict[str, str]] = {}
        self.steps: dict[str, tuple[str, str]] = {}  # step id -> (name, nodelist)
        self._ids = itertools.count(5001)
        self._step_ids: dict[str, itertools.count] = {}

    # ------------------------------------------------------------------ what the commands print
    def squeue_jobs(self) -> str:
        rows = [{"JobId": FOREIGN, "Name": "bash", "State": "RUNNING", "Reason": "None", "NodeList": self.nodes[0],
                 "NumNodes": "1", "Comment": "(null)", "TimeLeft": "2:13:07", "SubmitTime": _stamp(self.clock() - 900),
                 "TimeLimit": "4:00:00"}]
        rows += self.jobs.values()
        # -O "Field:<SEP>": each field printed unpadded, the separator after it (the last one too)
        return "".join("".join(f"{r[f]}{SEP}" for f in JOB_FIELDS) + "\n" for r in rows)

    def squeue_steps(self) -> str:
        lines = [f"{FOREIGN}.0{SEP}bash{SEP}{self.nodes[0]}", f"{FOREIGN}.extern{SEP}extern{SEP}{self.nodes[0]}"]
        for job, r in self.jobs.items():
            if r["State"] == "RUNNING":
                lines.append(f"{job}.batch{SEP}batch{SEP}{r['NodeList'].split(',')[0]}")
        lines += [f"{sid}{SEP}{name}{SEP}{nodes}" for sid, (name, nodes) in self.steps.items()]
        return "".join(line + "\n" for line in lines)

    # ------------------------------------------------------------------ the driver's command runner
    def _run(self, argv: list[str], check: bool = True, verb: str | None = None, timeout: float = 0) -> subprocess.CompletedProcess:
        self.commands += 1
        self.argvs.append(list(argv))
        self.tally[(verb or argv[0], True)] += 1
        verb, out, err, rc = argv[0], "", "", 0
        if verb == "squeue" and "--start" in argv:
            pass  # no expected start known (squeue prints none for a job it cannot place yet)
        elif verb == "squeue":
            if "-u" not in argv or argv[argv.index("-u") + 1] != self.user:
                raise AssertionError(f"squeue not limited to the user: {argv}")
            out = self.squeue_steps() if "-s" in argv else self.squeue_jobs()
        elif verb == "sbatch" and "--test-only" in argv:  # a question: nothing is queued
            start = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(self.clock()))
            err = f"sbatch: Job 9999 to start at {start} using 1 processors on nodes {self.nodes[0]} in partition debug"
        elif verb == "sbatch":
            out = self._sbatch(argv)
        elif verb == "scancel":
            target = argv[-1]
            if target in self.jobs:
                del self.jobs[target]
                self.steps = {s: v for s, v in self.steps.items() if s.split(".")[0] != target}
            elif self.steps.pop(target, None) is None:
                rc, err = 1, f"scancel: error: Kill job error on job id {target}: Invalid job id specified"
        elif verb == "scontrol":
            rc, err = 1, "slurm_load_jobs error: Invalid job id specified"
        else:
            raise AssertionError(f"an unexpected command: {argv}")
        return subprocess.CompletedProcess(argv, rc, out, err)

    def _sbatch(self, argv: list[str]) -> str:
        opt = {a.split("=", 1)[0]: a.split("=", 1)[1] for a in argv if a.startswith("--") and "=" in a}
        job = str(next(self._ids))
        count = int(opt["--nodes"])
        running = self.alloc_state == "RUNNING"
        self.jobs[job] = {
            "JobId": job, "Name": opt["--job-name"], "State": self.alloc_state,
            "Reason": "None" if running else self.reason,
            "NodeList": hostlist.compress(list(self.nodes[:count])) if running else "",
            "NumNodes": str(count), "Comment": opt["--comment"], "TimeLeft": "UNLIMITED" if running else "INVALID",
            "SubmitTime": _stamp(self.clock() - self.queued_for), "TimeLimit": opt.get("--time", "UNLIMITED"),
        }
        self._step_ids[job] = itertools.count(0)
        return f"{job}\n"

    def launch(self, job_id: str, unit: Unit, launch: Launch, step_name: str) -> None:
        """srun, recorded as the argv the driver builds; the step is listed from the next squeue on."""
        paths = step_paths(self.state_dir, unit, launch)
        self.commands += 1
        self.argvs.append(srun_argv(job_id, unit, launch, step_name, paths.log) +
                          wrapped_argv(launch, paths.status, step_name))
        self.tally[("srun", True)] += 1
        sid = f"{job_id}.{next(self._step_ids[job_id])}"
        self.steps[sid] = (step_name, hostlist.compress(list(launch.nodes)))
        return None

    def verbs(self, since: int = 0) -> list[str]:
        """The commands from ``since`` on, by name (``squeue``, ``squeue -s``, ``squeue --start``, ``sbatch``, ...)."""
        def name(a: list[str]) -> str:
            if a[0] == "squeue" and "--start" in a:
                return "squeue --start"
            return a[0] + (" -s" if a[0] == "squeue" and "-s" in a else "")

        return [name(a) for a in self.argvs[since:]]


def _stamp(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t))

