"""The real thing: sbatch, srun, squeue, scancel as subprocesses with argv lists."""

from __future__ import annotations

import getpass
import os
import subprocess
import time
from collections import Counter
from pathlib import Path

from reconciler import hostlist, labels
from reconciler.drivers import slurm_queue as queue
from reconciler.drivers.base import DriverError, rotate, step_env, step_paths, wrapped_argv
from reconciler import fsutil
from reconciler.drivers.exits import ExitWatch
from reconciler.core.plan.reservations import Reservation
from reconciler.core.refusal import LAUNCH_HEADER
from reconciler.world import Launch, Unit
from reconciler.world import Alloc, AllocSpec, Step
from reconciler.recipe.types import SBATCH_ALLOWED, SBATCH_OWNED, SRUN_ALLOWED

SEP = "\x1f"  # unit separator: cannot appear in names we create, unlikely in anyone's
JOB_FIELDS = ["JobId", "Name", "State", "Reason", "NodeList", "NumNodes", "Comment", "TimeLeft", "SubmitTime",
              "TimeLimit"]
CORE_FIELDS = 7  # a line without TimeLeft and SubmitTime (an older squeue) still parses
TIMEOUT = 60
ESTIMATE_TIMEOUT = 10  # sbatch --test-only: only reported, never worth a long stall of the tick
# squeue prints times as the user's SLURM_TIME_FORMAT says (%s, relative...): ours parses ISO
SLURM_ENV = {**os.environ, "SLURM_TIME_FORMAT": "standard"}


class SlurmDriver:
    name = "slurm"

    def __init__(self, state_dir: Path, user: str | None = None, owner: str | None = None):
        self.state_dir = Path(state_dir)
        self.user = user or getpass.getuser()
        self.owner = owner or labels.default_owner(self.state_dir)
        self.commands = 0
        self.tally: Counter[tuple[str, bool]] = Counter()  # (verb, succeeded) -> count, for the metrics
        self._children: list[subprocess.Popen] = []
        self.exits = ExitWatch()

    # ---------------------------------------------------------------- helpers
    def _run(self, argv: list[str], check: bool = True, verb: str | None = None,
             timeout: float = TIMEOUT) -> subprocess.CompletedProcess:
        self.commands += 1
        verb = verb or argv[0]
        self.tally[(verb, False)] += 1  # until it answers
        try:
            r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
                               env=SLURM_ENV)
        except FileNotFoundError:
            raise DriverError(f"{argv[0]} not found on PATH: is this a Slurm login node? (or use --driver local)") from None
        except subprocess.TimeoutExpired:
            raise DriverError(f"{argv[0]} did not answer within {timeout:g}s") from None
        if r.returncode == 0:
            self.tally[(verb, False)] -= 1
            self.tally[(verb, True)] += 1
        if check and r.returncode != 0:
            raise DriverError(f"{' '.join(argv[:2])} failed (exit {r.returncode}): {r.stderr.strip() or r.stdout.strip()}")
        return r

    def slurm(self, argv: list[str], check: bool = True, verb: str | None = None) -> subprocess.CompletedProcess:
        """A Slurm command of its own (a gateway's job), counted with the driver's."""
        return self._run(argv, check=check, verb=verb)

    # ---------------------------------------------------------------- observe
    def observe(self) -> tuple[list[Alloc], list[Step]]:
        jobs = self._run(squeue_jobs_argv(self.user)).stdout
        steps = self._run(squeue_steps_argv(self.user)).stdout
        allocs = parse_jobs(jobs, self.owner)
        return allocs, parse_steps(steps, self.owner, labels.tags({a.recipe for a in allocs}))

    # ---------------------------------------------------------------- act
    def submit(self, spec: AllocSpec) -> str:
        log = self.state_dir.absolute() / spec.recipe / "logs" / f"alloc-{spec.index}.out"
        fsutil.private_file(log, self.state_dir)  # slurmstepd opens it as root would: never a planted symlink
        argv = sbatch_argv(spec, self.owner, log)
        out = self._run(argv).stdout.strip()
        job_id = out.split(";", 1)[0]
        if not job_id:
            raise DriverError(f"sbatch printed no job id: {out!r}")
        return job_id

    def launch(self, job_id: str, unit: Unit, launch: Launch, step_name: str) -> subprocess.Popen:
        paths = step_paths(self.state_dir, unit, launch)
        fsutil.private_dirs(paths.log.parent, self.state_dir)
        rotate(paths.log)
        # made here at 0600, so srun's --open-mode=append keeps that mode and follows no symlink
        fsutil.private_file(paths.log, self.state_dir)
        argv = srun_argv(job_id, unit, launch, step_name, paths.log) + wrapped_argv(launch, paths.status, step_name)
        # the recipe's environment goes through the srun client's environment, which srun passes
        # to the step (its default --export=ALL): never in argv, which every user can read
        env = {**os.environ, **step_env(launch)}
        self.commands += 1
        self.tally[("srun", True)] += 1  # started; a launch that fails shows as LaunchFailed
        with fsutil.open_append(paths.srun, self.state_dir) as out:
            # which launch (and spec) the srun output after it is of: a refusal is told from an
            # older spec's, and a LaunchFailed shows this launch's words only (shell/refused.py)
            out.write(f"{LAUNCH_HEADER}{unit.spec_hash} {step_name}\n".encode())
            out.flush()
            # own session: the srun client (and so the step) outlives a reconciler restart; the
            # step's files are made with the umask the reconciler was started with (srun passes it)
            p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                 start_new_session=True, close_fds=True, env=env, umask=fsutil.user_umask())
        self._children.append(p)
        self.exits.watch(p.pid)  # the client ends with its step: the loop looks at once
        return p  # the step shows in squeue a moment later; until then the caller watches the client

    def cancel_step(self, step_id: str) -> None:
        r = self._run(scancel_argv(step_id), check=False)
        if r.returncode != 0 and "already completing or completed" not in r.stderr and "Invalid job id" not in r.stderr:
            raise DriverError(f"scancel {step_id} failed: {r.stderr.strip()}")

    def cancel_alloc(self, job_id: str) -> None:
        self.cancel_step(job_id)

    def job_end(self, job_id: str) -> tuple[str, str] | None:
        # slurmctld keeps an ended job for MinJobAge (300 s by default): long enough for the next tick
        try:
            r = self._run(["scontrol", "show", "job", "-o", job_id], check=False)
        except DriverError:
            return None
        return parse_job_end(r.stdout) if r.returncode == 0 else None

    def node_states(self, nodes: list[str]) -> dict[str, tuple[str, str]]:
        """node -> (State, Reason) as slurmctld says now; asked only about suspect or lost nodes."""
        if not nodes:
            return {}
        r = self._run(scontrol_nodes_argv(nodes), check=False)
        return parse_node_states(r.stdout) if r.returncode == 0 else {}

    def partition_nodes(self, partition: str | None) -> tuple[str, ...] | None:
        """The nodes of ``partition`` (None: the default one), or None when Slurm does not say."""
        r = self._run(["scontrol", "-o", "show", "partition", *([partition] if partition else [])], check=False)
        return parse_partition_nodes(r.stdout, partition) if r.returncode == 0 else None
    def reservations(self) -> list[Reservation]:
        """Every reservation slurmctld knows (asked at a slow pace: shell/cluster/slurm_watch.py)."""
        r = self._run(queue.reservations_argv(), check=False, verb="scontrol-reservations")
        return queue.parse_reservations(r.stdout) if r.returncode == 0 else []

    def expected_start(self, spec: AllocSpec) -> float | None:
        """When Slurm would start ``spec`` if submitted now (``sbatch --test-only``): None when it
        cannot say (or says it never could: the submission then fails with Slurm's own words)."""
        r = self._run(queue.test_only_argv(sbatch_argv(spec, self.owner, Path(os.devnull))), check=False,
                      verb="sbatch-test-only", timeout=ESTIMATE_TIMEOUT)
        return queue.parse_test_only(r.stderr + r.stdout) if r.returncode == 0 else None

    def pending_starts(self, job_ids: list[str]) -> dict[str, tuple[float | None, str]]:
        """job id -> (Slurm's expected start, its reason) for pending jobs: ``squeue --start``."""
        if not job_ids:
            return {}
        r = self._run(queue.squeue_start_argv(self.user), check=False, verb="squeue-start")
        starts = queue.parse_starts(r.stdout) if r.returncode == 0 else {}
        return {j: starts[j] for j in job_ids if j in starts}

    def reap(self) -> None:
        self._children = [p for p in self._children if p.poll() is None]


# ---------------------------------------------------------------- argv (pure; golden-tested)
def squeue_jobs_argv(user: str) -> list[str]:
    """Our jobs, one line each, fields split by SEP (-O: no width truncation)."""
    return ["squeue", "-h", "-u", user, "-O", ",".join(f"{f}:{SEP}" for f in JOB_FIELDS)]


def squeue_steps_argv(user: str) -> list[str]:
    return ["squeue", "-h", "-s", "-u", user, "-o", SEP.join(["%i", "%j", "%N"])]


# they carry the labels and the shape: a recipe that sets one is refused at load (recipe/types.py); an
# AllocSpec built otherwise still cannot override them
OWN_DIRECTIVES = SBATCH_OWNED


def sbatch_argv(spec: AllocSpec, owner: str, log: Path) -> list[str]:
    argv = [
        "sbatch", "--parsable",
        f"--job-name={labels.job_name(owner, spec.recipe, spec.index)}",
        f"--comment={labels.job_comment(owner, spec.recipe, spec.index, spec.start, spec.count, spec.gpus_per_node, spec.packed)}",
        f"--nodes={spec.count}", "--ntasks-per-node=1", f"--output={log}",
        # a job that loses a node ends (NODE_FAIL) instead of waiting out Slurm's requeue delay:
        # the reconciler replaces it at once, away from the node (docs/operations.md, node failures)
        "--no-requeue",
    ]
    if spec.gpus_per_node:
        argv.append(f"--gres=gpu:{spec.gpus_per_node}")
    if spec.partition:
        argv.append(f"--partition={spec.partition}")
    if spec.account:
        argv.append(f"--account={spec.account}")
    if spec.time_limit:
        argv.append(f"--time={spec.time_limit}")
    if spec.time_min:  # backfill may start it sooner with a shorter limit: squeue's TimeLimit says which
        argv.append(f"--time-min={spec.time_min}")
    if spec.reservation:
        argv.append(f"--reservation={spec.reservation}")
    exclude = list(spec.exclude)
    for k, v in spec.directives:
        if k == "exclude":  # the recipe's own exclusions join the suspect nodes in one --exclude
            exclude = [*hostlist.expand(v), *(n for n in exclude if n not in hostlist.expand(v))]
        elif k in SBATCH_ALLOWED:
            argv.append(f"--{k}={v}" if v != "" else f"--{k}")
        elif k not in OWN_DIRECTIVES:  # refused at load; an AllocSpec built otherwise still cannot pass it
            raise DriverError(f"sbatch --{k} is not an option the reconciler passes (recipe/types.py SBATCH_ALLOWED)")
    if exclude:
        argv.append(f"--exclude={hostlist.compress(sorted(set(exclude)))}")
    # the batch script only holds the nodes; the workers are steps
    return argv + ["--wrap", "exec sleep infinity"]


def srun_argv(job_id: str, unit: Unit, launch: Launch, step_name: str, log: Path) -> list[str]:
    """srun up to and including ``--``; the step's own argv follows."""
    argv = [
        "srun", f"--jobid={job_id}", "--overlap", f"--job-name={step_name}",
        f"--nodelist={hostlist.compress(list(launch.nodes))}", f"--nodes={len(launch.nodes)}",
        f"--ntasks={launch.ntasks}", f"--output={log}", "--open-mode=append",
    ]
    if not any(k == "kill-on-bad-exit" for k, _ in unit.srun_options):
        argv.append("--kill-on-bad-exit=0")  # one rank's exit is the reconciler's to see, not srun's to act on
    if launch.mpi:
        argv.append(f"--mpi={launch.mpi}")
    if unit.container:
        argv.append(f"--container-image={unit.container}")
    for k, v in unit.srun_options:
        if k not in SRUN_ALLOWED:  # refused at load; a unit built otherwise still cannot pass it
            raise DriverError(f"srun --{k} is not an option the reconciler passes (recipe/types.py SRUN_ALLOWED)")
        argv.append(f"--{k}={v}" if v != "" else f"--{k}")
    return argv + ["--"]


def scancel_argv(job_or_step: str) -> list[str]:
    return ["scancel", job_or_step]


def scontrol_nodes_argv(nodes: list[str]) -> list[str]:
    return ["scontrol", "-o", "show", "node", hostlist.compress(nodes)]


def parse_partition_nodes(text: str, partition: str | None) -> tuple[str, ...] | None:
    """`scontrol -o show partition` -> the nodes of ``partition`` (None: the one with Default=YES)."""
    for line in text.splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        if (fields.get("PartitionName") == partition) if partition else fields.get("Default") == "YES":
            nodes = fields.get("Nodes", "")
            return tuple(hostlist.expand(nodes)) if nodes and nodes != "(null)" else ()
    return None


def parse_node_states(text: str) -> dict[str, tuple[str, str]]:
    """`scontrol -o show node` -> node -> (State, Reason); Reason is the rest of its line (it has spaces)."""
    out = {}
    for line in text.splitlines():
        fields = dict(f.split("=", 1) for f in line.split(" Reason=")[0].split() if "=" in f)
        if "NodeName" in fields and "State" in fields:
            reason = line.split(" Reason=", 1)[1] if " Reason=" in line else ""
            out[fields["NodeName"]] = (fields["State"], reason.split(" [")[0].strip() if reason != "(null)" else "")
    return out


def parse_job_end(text: str) -> tuple[str, str] | None:
    """`scontrol show job -o` -> (JobState, Reason)."""
    fields = dict(f.split("=", 1) for f in text.split() if "=" in f)
    state = fields.get("JobState")
    return (state, fields.get("Reason", "")) if state else None


def parse_jobs(text: str, owner: str) -> list[Alloc]:
    out = []
    for line in text.splitlines():
        f = line.split(SEP)
        if len(f) < CORE_FIELDS:
            continue
        job_id, name, state, reason, nodelist, _num, comment = (x.strip() for x in f[:CORE_FIELDS])
        time_left = f[CORE_FIELDS].strip() if len(f) > CORE_FIELDS else ""
        submitted = parse_submit_time(f[CORE_FIELDS + 1]) if len(f) > CORE_FIELDS + 1 else None
        granted = f[CORE_FIELDS + 2].strip() if len(f) > CORE_FIELDS + 2 else ""
        lab = labels.parse_job(name, comment, owner)
        if lab is None:
            continue  # not ours: never touched
        nodes = tuple(hostlist.expand(nodelist)) if state == "RUNNING" else ()
        out.append(Alloc(job_id, lab.recipe, lab.index, lab.start, lab.count, state, reason, nodes, time_left,
                         submitted, granted, lab.gpus, lab.packed))
    return out


def parse_submit_time(text: str) -> float | None:
    """squeue prints SubmitTime in the login node's local time (2026-12-04T02:46:20)."""
    try:
        return time.mktime(time.strptime(text.strip(), "%Y-%m-%dT%H:%M:%S"))
    except (ValueError, OverflowError):
        return None  # "N/A", "Unknown": the recipe is then looked at on the resync


def parse_steps(text: str, owner: str, recipes: dict[str, str] | None = None) -> list[Step]:
    out = []
    for line in text.splitlines():
        f = line.split(SEP)
        if len(f) < 3:
            continue
        step_id, name, nodelist = (x.strip() for x in f[:3])
        lab = labels.parse_step(name, owner, recipes)
        if lab is None:
            continue
        out.append(Step(step_id, lab.recipe, lab.role, lab.index, lab.rank, lab.spec_hash, tuple(hostlist.expand(nodelist)),
                        slot=lab.slot))
    return out

