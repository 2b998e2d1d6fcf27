"""Recipe -> worker units: what exactly would run, process by process.

A *unit* is one logical worker (or the recipe's frontend): the thing that is
scaled, relaunched and rolled. It has one or more *launches* (srun steps): one
per node for per-process engines, one spanning all nodes for MPI engines.
``spec_hash`` covers what changes the processes (argv, env, container, config
files, launch shape) and nothing else — not the worker count, not the time.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from collections.abc import Mapping
from typing import TYPE_CHECKING

from reconciler import dynamo_install
from reconciler.backends.base import Runtime
from reconciler.ports import NodePortAllocator
from reconciler.recipe.model import Recipe
from reconciler.topology import Endpoint, Process

if TYPE_CHECKING:
    from reconciler.services.mooncake import Wiring

FRONTEND = "frontend"
SERVICE_PREFIX = "svc-"  # the step role of a service: svc-<name>


def is_service_role(role: str) -> bool:
    return role.startswith(SERVICE_PREFIX)


@dataclass(frozen=True)
class Launch:
    """One srun step."""

    rank: int  # node rank within the unit (0 for MPI launches)
    nodes: tuple[str, ...]
    ntasks: int
    mpi: str | None
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    gpus: tuple[int, ...] = ()


@dataclass(frozen=True)
class Unit:
    recipe: str
    role: str  # prefill | decode | agg | frontend
    index: int
    ordinals: tuple[int, ...]  # logical node ordinals of the recipe
    nodes: tuple[str, ...]  # hostnames, leader first
    gpus: tuple[int, ...]
    ports: Mapping[str, int]
    launches: tuple[Launch, ...]
    container: str | None
    files: Mapping[str, str] = field(default_factory=dict)
    health_port: int | None = None
    health_path: str = "/health"
    metrics_path: str | None = None  # Prometheus metrics on the health port (None: the unit serves none)
    fatal_patterns: tuple[str, ...] = ()
    srun_options: tuple[tuple[str, str], ...] = ()
    spec_hash: str = ""
    # how Ready is told: http (GET health_path is 200), dynamo (a Dynamo system server whose
    # endpoints are all ready), tcp (the port accepts), log (a line matches probe_arg),
    # file (probe_arg exists, non-empty), started (running is enough)
    probe: str = "http"
    probe_arg: str = ""
    phase: str = ""  # services only: infra | before_workers | with_workers | after_frontend
    startup_timeout: float | None = None  # None: the recipe's startup grace
    probe_interval: float = 0.0  # services: seconds between probes (readiness.interval_seconds); 0: every pass
    critical: bool = False
    worker_api: str = ""  # a frontend whose worker set the shell keeps in step with readiness: "sglang-router"
    scheme: str = "http"  # how a router reaches it: http, or grpc (Backend.is_grpc_mode)

    @property
    def is_service(self) -> bool:
        return bool(self.phase)

    @property
    def name(self) -> str:
        return f"{self.role}_{self.index}"

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.recipe, self.role, self.index)

    @property
    def url(self) -> str | None:
        return f"{self.scheme}://{self.nodes[0]}:{self.health_port}" if self.health_port else None


def spec_hash(
    launches: tuple[Launch, ...], container: str | None, files: Mapping[str, str],
    srun_options: tuple[tuple[str, str], ...] = (),
) -> str:
    doc = {
        "launches": [[l.rank, l.ntasks, l.mpi, list(l.argv), [list(e) for e in l.env]] for l in launches],
        "container": container,
        "files": dict(sorted(files.items())),
    }
    if srun_options:
        doc["srun"] = [list(o) for o in srun_options]
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:10]


MODEL_MOUNT = "/model"  # where srtctl mounts a local model directory in the container


def runtime_for(recipe: Recipe, state_dir: Path, python: str = "python3") -> Runtime:
    backend = recipe.backend
    path = recipe.model.path
    if path.startswith("hf:"):
        # srtctl: the engine gets the bare Hugging Face id and downloads it itself
        path = path[3:]
    # srtctl serves a model under its last path component (hf:Qwen/Qwen3-0.6B -> Qwen3-0.6B)
    default_name = path.rstrip("/").split("/")[-1] or recipe.name
    return Runtime(
        model_path=MODEL_MOUNT if _model_mount(recipe) else path,
        served_model_name=backend.get_served_model_name(default_name),
        frontend_type=recipe.frontend.type,
        config_dir=str(Path(state_dir).absolute() / recipe.name / "configs"),
        python=python,
        engine_python=recipe.reconcile.engine_python,
    )


def _model_mount(recipe: Recipe) -> str | None:
    """The host directory mounted at /model: a local model path, when workers run in containers."""
    path = recipe.model.path
    if not _containers_used(recipe) or path.startswith("hf:") or not path.startswith("/"):
        return None
    return path


def _containers_allowed(recipe: Recipe, backend) -> bool:
    return recipe.reconcile.container_runtime != "none" and backend.uses_container()


def _containers_used(recipe: Recipe) -> bool:
    return _containers_allowed(recipe, recipe.backend) and any(
        (r.container or recipe.model.container) for _, r in recipe.roles.items())


def container_srun_options(recipe: Recipe, config_dir: str) -> dict[str, str]:
    """srtctl's container flags: the model at /model, the config files, the recipe's mounts; no home, no entrypoint."""
    mounts = {}
    if (model := _model_mount(recipe)):
        mounts[model] = MODEL_MOUNT
    mounts[config_dir] = config_dir  # engine config files are written there on the host
    mounts |= dict(recipe.container_mounts)
    for m in recipe.extra_mount or []:
        host, _, ctr = m.partition(":")
        mounts[host] = ctr or host
    return {"container-mounts": ",".join(f"{h}:{c}" for h, c in mounts.items()),
            "no-container-mount-home": "", "no-container-entrypoint": ""}


def worker_units(
    recipe: Recipe,
    endpoints: list[Endpoint],
    hostnames: Mapping[int, str],
    ports: NodePortAllocator,
    runtime: Runtime,
    extra_env: Mapping[str, str] | None = None,
    mooncake: Wiring | None = None,
) -> list[Unit]:
    """Units for ``endpoints`` (all of whose node ordinals must be in ``hostnames``);
    ``extra_env``: the discovery environment of a Dynamo recipe, under the recipe's own;
    ``mooncake``: the Mooncake master's wiring, over everything else."""
    by_ep: dict[tuple[str, int], list[Process]] = {}
    for mode in dict.fromkeys(ep.mode for ep in endpoints):  # each role through its own engine, one allocator
        mine = [ep for ep in endpoints if ep.mode == mode]
        for p in recipe.backend_for(mode).endpoints_to_processes(mine, hostnames, ports, f"{recipe.name}/"):  # type: ignore[arg-type]
            by_ep.setdefault((p.mode, p.index), []).append(p)
    units = []
    for ep in endpoints:
        backend = recipe.backend_for(ep.mode)
        srun = backend.get_srun_config()
        container = _container(recipe, backend)
        container_ok = _containers_allowed(recipe, backend)
        ps = by_ep[(ep.mode, ep.index)]
        role = recipe.roles[ep.mode]
        files = backend.config_files(ep.mode, runtime)
        if mooncake is not None:
            files = {**files, **mooncake.files.get(ep.mode, {})}
        role_container = (role.container or container) if container_ok else None
        # srtctl installs the recipe's Dynamo into the container first; on the hosts it is there already
        pre = dynamo_install.preamble(recipe) if role_container else []
        role_runtime = runtime
        if not role_container and runtime.model_path == MODEL_MOUNT and _model_mount(recipe):
            role_runtime = replace(runtime, model_path=recipe.model.path)  # this role runs on the host
        launches = []
        for p in ps:
            env = dict(extra_env or {})
            env.update(recipe.environment)
            env.update(backend.get_environment_for_mode(ep.mode))
            env.update(backend.get_process_environment(p))
            if backend.should_set_visible_devices() and ep.partial_node:
                env[recipe.reconcile.visible_devices_env] = ",".join(map(str, ep.gpus))
            if mooncake is not None:
                env = mooncake.stamp(ep.mode, p.node, env)
            argv = pre + backend.build_worker_command(p, role_runtime)
            if srun.per_process:
                nodes, ntasks = (p.node,), 1
            else:
                nodes, ntasks = p.hosts, backend.process_ntasks(p)
            launches.append(Launch(p.node_rank, nodes, ntasks, srun.mpi, tuple(argv), tuple(sorted(env.items())), ep.gpus))
        launches_t = tuple(launches)
        probe = backend.health_probe(ep.mode)
        patterns = tuple(backend.fatal_log_patterns(ep.mode)) if recipe.health_check.fatal_log_markers else ()
        patterns += tuple(recipe.health_check.extra_fatal_log_patterns)
        hosts = tuple(hostnames[n] for n in ep.nodes)
        own = backend.srun_options(ep) | (container_srun_options(recipe, runtime.config_dir) if role_container else {})
        merged = {**own, **recipe.srun_options, **role.srun_options}
        if "container-mounts" in own and merged["container-mounts"] != own["container-mounts"]:
            # a recipe's own mounts add to the model and config mounts the argv relies on
            merged["container-mounts"] = own["container-mounts"] + "," + merged["container-mounts"]
        srun_opts = tuple(sorted(merged.items()))
        units.append(Unit(
            recipe=recipe.name, role=ep.mode, index=ep.index, ordinals=ep.nodes, nodes=hosts, gpus=ep.gpus,
            ports=dict(ps[0].ports), launches=launches_t, container=role_container, files=files,
            health_port=ps[0].ports.get(probe.port_name), health_path=probe.path,
            metrics_path=backend.prometheus_metrics_path, fatal_patterns=patterns, probe=probe.kind,
            srun_options=srun_opts, spec_hash=spec_hash(launches_t, role_container, files, srun_opts),
            scheme="grpc" if backend.is_grpc_mode() else "http",
        ))
    return units


def _container(recipe: Recipe, backend) -> str | None:
    return recipe.model.container if _containers_allowed(recipe, backend) else None


def endpoints_path(state_dir: Path, recipe: str) -> Path:
    return Path(state_dir).absolute() / recipe / "endpoints.json"


def node_count(recipe: Recipe) -> int:
    from reconciler.topology import allocate

    _, n = allocate(recipe.role_layouts(), recipe.resources.gpus_per_node, recipe.resources.spread_workers)
    return n
