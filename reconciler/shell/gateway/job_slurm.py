"""The Slurm side of a gateway's own job (shell/gateway/job.py): where it runs, its sbatch argv
and batch script, squeue's lines, and which listed job is the gateway's."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

AGENT = "reconciler.gateway.agent"
RUNNING = ("RUNNING",)


@dataclass(frozen=True)
class Placement:
    """Where the job runs: reconcile.gateway.allocation, with the recipe's slurm: defaults."""

    node: str
    partition: str | None = None
    account: str | None = None
    time: str | None = None
    memory: str = "1G"
    qos: str | None = None
    reservation: str | None = None


@dataclass(frozen=True)
class Job:
    id: str
    state: str
    node: str
    reason: str


def placement(recipe) -> Placement | None:
    """Where a recipe's gateway job runs (None: next to the reconciler). Partition and account
    default to the recipe's slurm: section (and so to the cluster config's defaults)."""
    a = recipe.reconcile.gateway.allocation
    if a is None:
        return None
    qos = recipe.sbatch_directives.get("qos")
    return Placement(a.node, a.partition or recipe.slurm.partition, a.account or recipe.slurm.account, a.time,
                     a.memory, a.qos or (str(qos) if qos is not None else None), recipe.slurm.reservation)


def batch_script(python: str, nginx: str, prefix: Path, holder_argv: list[str]) -> str:
    """The job's batch script: the agent, every word quoted (a state directory may hold anything)."""
    argv = [python, "-m", AGENT, "--prefix", str(prefix), "--nginx", nginx, "--holder", *holder_argv]
    return ("#!/bin/sh\n# the gateway's own job (reconcile.gateway.allocation), written by the reconciler\n"
            "exec " + " ".join(shlex.quote(a) for a in argv) + "\n")


def sbatch_argv(name: str, place: Placement, script: Path, out: Path) -> list[str]:
    # --mem: where memory is a consumable resource, a job without it may be given the whole node's
    argv = ["sbatch", "--parsable", f"--job-name={name}", "--nodes=1", "--ntasks=1", "--cpus-per-task=1",
            f"--mem={place.memory}", f"--nodelist={place.node}", f"--output={out}", "--open-mode=append",
            "--no-requeue"]
    argv += [f"--{k}={v}" for k, v in (("partition", place.partition), ("account", place.account),
                                       ("time", place.time), ("qos", place.qos),
                                       ("reservation", place.reservation)) if v]
    return argv + [str(script)]


def parse_jobs(text: str) -> list[Job]:
    out = []
    for line in text.splitlines():
        parts = line.strip().split("|", 3)
        if len(parts) == 4 and parts[0]:
            out.append(Job(*(p.strip() for p in parts)))
    return out


def pick(jobs: list[Job], recorded: str | None) -> Job | None:
    """The gateway's job among those listed: the recorded one if it runs, else one that runs
    (a serving job is never given up for a waiting one), else the recorded one, else any."""
    running = [j for j in jobs if j.state in RUNNING]
    return (next((j for j in running if j.id == recorded), None) or (running[0] if running else None)
            or next((j for j in jobs if j.id == recorded), None) or (jobs[0] if jobs else None))
