"""The driver protocol: the only place the reconciler touches the cluster."""

from __future__ import annotations

import functools
import os
import re
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
#
# GPU indices in a recipe are the job's own (0..n-1). Slurm tells a step which devices it was
# given in the same variable (CUDA_VISIBLE_DEVICES=4,5 for a job's 2 GPUs on a node that does
# not confine devices; 0,1 where cgroups renumber them), so logical index k is the k-th entry
# of that list: without the mapping a worker of the second job on a node would use the first
# job's GPU 0. No list (no Slurm, no gres, or Slurm's NoDevFiles: a gres with no File=): the
# indices are used as they are.
# Maps the recipe's GPU indices to the step's own (above); shared by both launchers below.
_GPU_MAP = r"""nth() { _k=$1; _o=$IFS; IFS=,; set -f; set -- $2; set +f; IFS=$_o
  [ "$_k" -lt "$#" ] || return 1; shift "$_k"; printf %s "$1"; }
if [ -n "$var" ]; then
  # another variable (HIP_VISIBLE_DEVICES) goes by Slurm's CUDA list, unless Slurm also narrowed
  # ROCR_VISIBLE_DEVICES: the runtime then numbers the step's GPUs from 0 already
  have=$(printenv "$var") || { [ -n "${ROCR_VISIBLE_DEVICES-}" ] || have=${CUDA_VISIBLE_DEVICES-}; }
  case $have in NoDevFiles) have= ;; esac
  if [ -n "$have" ]; then
    map=
    for k in $(printf %s "$want" | tr , ' '); do
      g=$(nth "$k" "$have") || {
        echo "reconciler: GPU $k is not one this step holds ($var=$have): the job holds fewer GPUs than the recipe packs here" >&2
        printf '97 %s\n' "$(date +%s)" >"$status.tmp" && mv -f "$status.tmp" "$status"; exit 97; }
      map=${map:+$map,}$g
    done
    want=$map
  fi
  export "$var=$want"
fi
"""

LAUNCHER = r"""status=$1; var=$2; want=$3; names=$4; shift 4
""" + _GPU_MAP + r"""# the recipe's environment arrives in this process's own environment, each variable under ENV_PREFIX,
# and only the names in argv ($names): a value in argv is world-readable in /proc/<pid>/cmdline (ps),
# an environment only to its owner. Set in the engine's subshell alone, so the launcher's own
# commands (date, mv) keep their PATH; the subshell execs the engine, so $child is the engine.
(
  for _rcl_k in $names; do
    eval "[ -n \"\${RCL_ENV_$_rcl_k+x}\" ]" || {
      echo "reconciler: $_rcl_k was not passed to the step (RCL_ENV_$_rcl_k unset)" >&2; exit 96; }
    eval "export $_rcl_k=\"\${RCL_ENV_$_rcl_k}\"; unset RCL_ENV_$_rcl_k"
  done
  unset _rcl_k
  exec "$@"
) &
child=$!
trap 'kill -TERM "$child" 2>/dev/null' TERM INT HUP
while :; do
  wait "$child"; rc=$?
  kill -0 "$child" 2>/dev/null || break
done
rm -f "$status.tmp"  # a planted symlink is removed, not written through
(umask 077; printf '%s %s\n' "$rc" "$(date +%s)" >"$status.tmp") && mv -f "$status.tmp" "$status"
exit "$rc"
"""

# The launcher of the releases before the environment left argv (`env K=V ...` as arguments): the
# local driver still recognises its running steps after an upgrade.
LAUNCHER_BEFORE = r"""status=$1; var=$2; want=$3; shift 3
""" + _GPU_MAP + r""""$@" &
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


ENV_PREFIX = "RCL_ENV_"  # the launcher's own environment carries the step's under this prefix
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _split_env(launch: Launch) -> tuple[str, str, dict[str, str]]:
    """(the device variable, its logical GPU indices, the rest of the environment: last one wins)."""
    var = launch.visible_env if any(k == launch.visible_env for k, _ in launch.env) else ""
    want = next((v for k, v in launch.env if var and k == var), "")
    env: dict[str, str] = {}
    for k, v in launch.env:
        if var and k == var:
            continue
        if not _NAME.fullmatch(k):  # a recipe's names are checked at load; anything else is a bug here
            raise DriverError(f"environment variable name {k!r} of a step is not a shell name")
        if "\0" in v:
            raise DriverError(f"environment variable {k} of a step holds a NUL byte")
        env[k] = v
    return var, want, env


def wrapped_argv(launch: Launch, status: Path, step_name: str) -> list[str]:
    """argv of the step: the launcher (its $0 is the step name, visible in ps), the exit-status
    file, the device variable and its logical GPU indices (mapped in the step onto the GPUs Slurm
    gave it), the names of the variables it sets (never their values: see ``step_env``), then the
    command."""
    var, want, env = _split_env(launch)
    return ["/bin/sh", "-c", LAUNCHER, step_name, str(status), var, want, " ".join(env), *launch.argv]


def step_env(launch: Launch) -> dict[str, str]:
    """What the launcher's own environment must add (the srun client's, which srun passes to the
    step; the local driver's process): each variable under ENV_PREFIX. /proc/<pid>/environ is
    readable by the process's owner alone, where its cmdline is readable by everyone."""
    return {ENV_PREFIX + k: v for k, v in _split_env(launch)[2].items()}


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
