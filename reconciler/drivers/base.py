"""The driver protocol: the only place the reconciler touches the cluster."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from reconciler.errors import ReconcilerError
from reconciler.world import Launch, Unit
from reconciler.world import Alloc, AllocSpec, Step

# Runs inside the step: starts the worker, forwards SIGTERM, and records its exit
# status in a file so it is known even after the reconciler restarts. The file
# holds the last life that ended; a relaunch does not clear it. Constant
# text; everything from the recipe arrives as positional arguments ("$@").
LAUNCHER = r"""status=$1; shift
"$@" &
child=$!
trap 'kill -TERM "$child" 2>/dev/null' TERM INT HUP
while :; do
  wait "$child"; rc=$?
  kill -0 "$child" 2>/dev/null || break
done
printf '%s %s\n' "$rc" "$(date +%s)" >"$status.tmp" && mv -f "$status.tmp" "$status"
exit "$rc"
"""


class DriverError(ReconcilerError):
    pass


@dataclass(frozen=True)
class StepPaths:
    log: Path  # the worker's output
    status: Path  # "<exit code> <time>" written by the launcher
    srun: Path  # the srun client's own output (launch errors)


@functools.lru_cache(maxsize=1 << 16)  # asked for every unit on every tick
def step_log_paths(state_dir: Path, recipe: str, unit: str, rank: int) -> StepPaths:
    base = os.path.join(os.path.abspath(state_dir), recipe, "logs", f"{unit}.{rank}")
    return StepPaths(*(Path(f"{base}.{ext}") for ext in ("log", "exit", "srun")))


def step_paths(state_dir: Path, unit: Unit, launch: Launch) -> StepPaths:
    return step_log_paths(state_dir, unit.recipe, unit.life, launch.rank)


def wrapped_argv(launch: Launch, status: Path, step_name: str) -> list[str]:
    """argv of the step: the launcher (its $0 is the step name, visible in ps), the
    exit-status file, then `env K=V... cmd...`."""
    return ["/bin/sh", "-c", LAUNCHER, step_name, str(status), "env", *[f"{k}={v}" for k, v in launch.env],
            *launch.argv]


def rotate(log: Path) -> None:
    """Keep the previous life's log as <log>.1; the new life starts a fresh file."""
    if log.exists():
        log.replace(log.with_name(log.name + ".1"))


class Launched(Protocol):
    def poll(self) -> int | None: ...


class Driver(Protocol):
    name: str
    owner: str  # this reconciler's identity in every label it writes and reads
    commands: int  # cluster commands issued so far (squeue, sbatch, srun, scancel)

    def observe(self) -> tuple[list[Alloc], list[Step]]:
        """Our allocations and steps: exactly one job query and one step query."""

    def submit(self, spec: AllocSpec) -> str:
        """Submit an allocation; return its job id."""

    def launch(self, job_id: str, unit: Unit, launch: Launch, step_name: str) -> Launched | None:
        """Start one step without waiting for it; it must outlive us. When the step is not
        observable at once (Slurm registers it a moment later), return a handle whose
        ``poll()`` is not None once the launcher has exited."""

    def cancel_step(self, step_id: str) -> None: ...

    def cancel_alloc(self, job_id: str) -> None: ...

    def job_end(self, job_id: str) -> tuple[str, str] | None:
        """How a job that left the queue ended: (state, reason), or None when nobody can say."""

    def reap(self) -> None:
        """Collect finished child processes (srun clients) so none are left as zombies."""
