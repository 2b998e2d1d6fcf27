"""The base of every recipe section: strict (unknown keys are errors) and frozen; env values."""

from __future__ import annotations

import re
import types
import typing
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, ValidationInfo, field_validator
from reconciler.logpattern import PatternError, compile_pattern


def _flat(tp: Any) -> set:
    """The types a field's annotation takes, unions opened (a Literal counts as its values' types)."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return set().union(*(_flat(a) for a in typing.get_args(tp)))
    if origin is typing.Literal:
        return {type(v) for v in typing.get_args(tp)}
    return {tp}


def _numeric(tp: Any) -> bool:
    """A field that takes a number and no boolean (``int``, ``float | None``, ``int | Literal["x"]``)."""
    kinds = _flat(tp)
    return bool(kinds & {int, float}) and bool not in kinds and Any not in kinds


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    @field_validator("*", mode="before")
    @classmethod
    def _no_boolean_for_a_number(cls, v: Any, info: ValidationInfo) -> Any:
        # YAML's true/false would be taken as 1/0 (`workers: true`, `hold_seconds: yes`): a mistake
        # that validated silently
        if isinstance(v, bool) and info.field_name is not None:
            f = cls.model_fields.get(info.field_name)
            if f is not None and _numeric(f.annotation):
                raise ValueError(f"expected a number, found the boolean {str(v).lower()}")
        return v


def _env_value(v: Any) -> Any:
    # YAML turns `PYTHONUNBUFFERED: 1` into an int; the process sees text anyway
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return str(v)
    return v


def _env_name(k: str) -> str:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k):
        raise ValueError(f"expected an environment variable name (letters, digits, _), found {k!r}")
    return k


EnvValue = Annotated[str, BeforeValidator(_env_value)]
Env = dict[Annotated[str, AfterValidator(_env_name)], EnvValue]

# variables the reconciler sets per worker process from the ports it allocates: a recipe's value
# would be overwritten in silence (or, kept, collide with another worker's port block)
PROCESS_OWNED_ENV = ("VLLM_PORT", "DYN_SYSTEM_PORT", "DYN_VLLM_KV_EVENT_PORT", "VLLM_NIXL_SIDE_CHANNEL_PORT")


def _worker_env_name(k: str) -> str:
    k = _env_name(k)
    if k in PROCESS_OWNED_ENV:
        raise ValueError(f"{k} is set by the reconciler for each worker process (from the ports it allocates "
                         "on the node); remove it")
    return k


WorkerEnv = dict[Annotated[str, AfterValidator(_worker_env_name)], EnvValue]

# the options the reconciler sets itself: they carry its labels, the job's shape and the logs
# its probes read, so a recipe may not set them (nor an abbreviation, which sbatch/srun expand)
# (``requeue`` is the recipe's to choose: a requeued job is released and replaced, docs/operations.md)
SBATCH_OWNED = ("job-name", "comment", "nodes", "output", "parsable", "wrap", "ntasks-per-node")
SRUN_OWNED = ("jobid", "job-name", "overlap", "nodelist", "nodes", "ntasks", "output", "open-mode")
_REAL_PREFIXES = {"ntasks"}  # real sbatch options that are also the start of one we own


# The options a recipe may pass, by name (an allow-list: a deny-list missed --uid, which submitted
# as another user whose jobs the reconciler never saw, and srun --prolog, which ran a recipe's
# command on the login node). The floor is srtctl's own: its docs (topology.md, services.md) and
# every key the recipes of ../shared/corpus use; beyond it, options that only shape the job's
# resources, placement and scheduling. Not here, so refused at validate: who runs it (uid, gid),
# where it reads, writes or runs (chdir, error, input, export, prolog, epilog, task-prolog,
# bcast, multi-prog), jobs the reconciler would not own or see (array, clusters, hold, wrap), and
# machine-wide acts (reboot).
SBATCH_ALLOWED = frozenset({
    # srtctl: topology.md's table and the corpus
    "mail-user", "mail-type", "reservation", "constraint", "exclusive", "gres", "dependency", "qos",
    "cpus-per-task", "mem", "cpus-per-gpu",
    # resources, placement and scheduling of the job
    "begin", "exclude", "nodelist", "requeue", "no-requeue", "mem-per-cpu", "mem-per-gpu", "gpus",
    "gpus-per-node", "gpus-per-task", "gpu-bind", "gpu-freq", "cpu-freq", "ntasks-per-gpu", "hint",
    "threads-per-core", "cores-per-socket", "sockets-per-node", "switches", "licenses", "tmp", "wckey",
    "nice", "spread-job", "contiguous", "oversubscribe", "core-spec", "thread-spec", "network",
    "distribution", "mincpus", "signal", "deadline", "prefer", "use-min-nodes",
})
SRUN_ALLOWED = frozenset({
    # srtctl: topology.md's table, services.md and the corpus
    "cpu-bind", "mpi", "ntasks-per-node", "gpus-per-task", "mem", "exclusive",
    # what the backends and the container plugin (pyxis) pass, which a recipe may set too
    "kill-on-bad-exit", "oversubscribe", "cpus-per-task", "container-mounts", "no-container-mount-home",
    "no-container-entrypoint", "container-remap-root", "no-container-remap-root", "container-writable",
    "container-readonly",
    # resources and placement of a step
    "cpus-per-gpu", "mem-per-cpu", "mem-per-gpu", "mem-bind", "gpus", "gpus-per-node", "gpu-bind",
    "gpu-freq", "cpu-freq", "gres", "gres-flags", "hint", "threads-per-core", "distribution", "constraint",
    "network", "exact", "whole", "overcommit", "ntasks-per-gpu", "ntasks-per-socket", "ntasks-per-core",
    "sockets-per-node", "cores-per-socket", "accel-bind", "unbuffered", "wait", "signal",
})


def _option_name(owned: tuple[str, ...], allowed: frozenset[str], tool: str):
    def check(k: str) -> str:
        if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]*", k):
            raise ValueError(f"expected an {tool} long option name without '--' or '=' (like cpus-per-task), "
                             f"found {k!r}")
        mine = [o for o in owned if o == k or (o.startswith(k) and k not in _REAL_PREFIXES)]
        if mine:
            raise ValueError(f"{tool} --{mine[0]} is set by the reconciler (its labels, the job's shape, "
                             f"the logs it reads); a recipe cannot set it, found {k!r}")
        if k not in allowed:  # an abbreviation too: sbatch/srun would expand it to whatever it names
            raise ValueError(f"{tool} --{k} is not an option a recipe may pass (it may change who runs the job, "
                             f"what it reads, writes or runs, or hide it from the reconciler); the allowed "
                             f"ones are listed in docs/recipes.md")
        return k
    return check


def _sbatch_values(d: dict[str, str]) -> dict[str, str]:
    # the recipe's exclusions are merged with the suspect nodes at every submit: a hostlist that
    # does not parse must fail here, located, not at each submit
    if "exclude" in d:
        from reconciler import hostlist

        try:
            hostlist.expand(d["exclude"])
        except ValueError as e:
            raise ValueError(f"exclude: expected a Slurm hostlist (like node[1-3],gpu7), found {d['exclude']!r}: {e}") \
                from None
    return d


SbatchOptions = Annotated[dict[Annotated[str, AfterValidator(_option_name(SBATCH_OWNED, SBATCH_ALLOWED, "sbatch"))],
                               EnvValue], AfterValidator(_sbatch_values)]
SrunOptions = dict[Annotated[str, AfterValidator(_option_name(SRUN_OWNED, SRUN_ALLOWED, "srun"))], EnvValue]


class PlacementConfig(Strict):
    node: str = "head"


def _arg_name(k: str) -> str:
    # a key is one flag; its value is the flag's value: "port=5555" would slip past the checks
    # on the flags the reconciler sets itself (--port, --http-port, ...)
    if not re.fullmatch(r"-{0,2}[A-Za-z0-9][A-Za-z0-9_.-]*", k):
        raise ValueError(f"expected a flag name (like tensor-parallel-size or --max-model-len) without '=' "
                         f"or spaces, its value as the value; found {k!r}")
    return k


ArgName = Annotated[str, AfterValidator(_arg_name)]


def check_regex(p: str) -> str:
    """A recipe's log pattern: one RE2 matches in linear time (reconciler/logpattern.py), so no
    line a worker prints can stall the tick; what RE2 cannot do is refused here, at the key."""
    try:
        compile_pattern(p)
    except PatternError as e:
        raise ValueError(str(e)) from None
    return p

