"""Recipe -> worker units: what exactly would run, process by process.

A *unit* is one logical worker (or the recipe's frontend): the thing that is
scaled, relaunched and rolled. It has one or more *launches* (srun steps): one
per node for per-process engines, one spanning all nodes for MPI engines.
``spec_hash`` covers what changes the processes (argv, env, container, config
files, launch shape) and nothing else — not the worker count, not the time.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from collections.abc import Mapping
from typing import TYPE_CHECKING

from reconciler.backends import dynamo_install
from reconciler.desired import netaddr
from reconciler.desired import preambles
from reconciler.backends.base import Runtime
from reconciler.core.ports import NodePortAllocator
from reconciler.recipe.model import Recipe
from reconciler.recipe.topology import Endpoint, Process
from reconciler.world import FRONTEND, Launch, Unit, spec_hash  # noqa: F401 - FRONTEND: the name callers know
from reconciler.backends.registry import backend_for, backend_of

if TYPE_CHECKING:
    from reconciler.desired.services.mooncake import Wiring

# what srtctl's worker stage sets on every dynamo.* worker, under the recipe's env (cli/mixins/worker_stage.py)
DYNAMO_WORKER_ENV = {"DYN_LOG": "info,dynamo_runtime::pipeline::network::ingress::push_handler=warn",
                     "DYN_SKIP_SGLANG_LOG_FORMATTING": "1"}

# frontends that are the engine's own server: the aggregated worker is the public endpoint
DIRECT_FRONTENDS = ("vllm", "sglang")

MODEL_MOUNT = "/model"  # where srtctl mounts a local model directory in the container


def runtime_for(recipe: Recipe, state_dir: Path, python: str = "python3") -> Runtime:
    backend = backend_of(recipe)
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
    return _containers_allowed(recipe, backend_of(recipe)) and any(
        (r.container or recipe.model.container) for _, r in recipe.roles.items())


def container_srun_options(recipe: Recipe, config_dir: str) -> dict[str, str]:
    """srtctl's container flags: the model at /model, the config files, the recipe's mounts; no home, no entrypoint."""
    mounts = {}
    if (model := _model_mount(recipe)):
        mounts[model] = MODEL_MOUNT
    mounts[config_dir] = config_dir  # engine config files are written there on the host
    mounts |= preambles.configs_mount(recipe)  # srtctl's configs directory at /configs (setup_script)
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
    job_of: Mapping[tuple[str, int], str] | None = None,
    needs: Mapping[tuple[str, int], tuple[tuple[str, int], ...]] | None = None,
) -> list[Unit]:
    """Units for ``endpoints`` (all of whose node ordinals must be in ``hostnames``);
    ``extra_env``: the discovery environment of a Dynamo recipe, under the recipe's own;
    ``mooncake``: the Mooncake master's wiring, over everything else. Under ``engine.failover``
    every worker is ``1 + shadow_engines`` units, one per engine; ``job_of`` (worker -> job)
    names their shared directory, ``needs`` (worker -> units) what must be Ready before them."""
    from reconciler.backends import failover

    engines = failover.engines_per_worker(recipe)
    if engines > 1:
        endpoints = [replace(ep, engine=k) for ep in endpoints for k in range(engines)]
    by_ep: dict[str, list[Process]] = {}
    for mode in dict.fromkeys(ep.mode for ep in endpoints):  # each role through its own engine, one allocator
        mine = [ep for ep in endpoints if ep.mode == mode]
        for p in backend_for(recipe, mode).endpoints_to_processes(mine, hostnames, ports, f"{recipe.name}/"):  # type: ignore[arg-type]
            by_ep.setdefault(p.endpoint.name, []).append(p)
    if recipe.frontend.port and recipe.frontend.type in DIRECT_FRONTENDS and "agg_0" in by_ep:
        # the worker is the recipe's public endpoint: it serves on frontend.port (srtctl: 8000)
        lead = by_ep["agg_0"]
        by_ep["agg_0"] = [replace(lead[0], ports={**lead[0].ports, "http": recipe.frontend.port}), *lead[1:]]
    units = []
    # only nodes that run a worker here publish their address (netaddr); others keep their name
    worker_hosts = sorted({hostnames[n] for ep in endpoints for n in ep.nodes})
    for ep in endpoints:
        units.append(_worker_unit(recipe, ep, by_ep[ep.name], hostnames, runtime, extra_env, mooncake,
                                  (job_of or {}).get((ep.mode, ep.index), failover.RENDER_JOB),
                                  (needs or {}).get((ep.mode, ep.index), ()), worker_hosts))
    return units


def _worker_unit(recipe: Recipe, ep: Endpoint, ps: list[Process], hostnames: Mapping[int, str], runtime: Runtime,
                 extra_env: Mapping[str, str] | None, mooncake: Wiring | None, job: str,
                 needs: tuple[tuple[str, int], ...], worker_hosts: list[str]) -> Unit:
    from reconciler.backends import failover

    backend = backend_for(recipe, ep.mode)
    fo = failover.config_of(recipe)
    srun = backend.get_srun_config()
    container = _container(recipe, backend)
    container_ok = _containers_allowed(recipe, backend)
    role = recipe.roles[ep.mode]
    files = backend.config_files(ep.mode, runtime)
    if mooncake is not None:
        files = {**files, **mooncake.files.get(ep.mode, {})}
    role_container = (role.container or container) if container_ok else None
    # srtctl installs the recipe's Dynamo into the container first; on the hosts it is there already
    pre = preambles.setup_script(recipe, bool(role_container))
    pre += dynamo_install.preamble(recipe) if role_container else []
    role_runtime = runtime
    if not role_container and runtime.model_path == MODEL_MOUNT and _model_mount(recipe):
        role_runtime = replace(runtime, model_path=recipe.model.path)  # this role runs on the host
    launches = []
    for p in ps:
        env = dict(DYNAMO_WORKER_ENV) if recipe.frontend.type == "dynamo" else {}
        env.update(extra_env or {})
        if nvtx_preset(recipe):
            env.update(backend.nvtx_environment)  # under the recipe's and the role's own
        env.update(recipe.environment)
        env.update(backend.get_environment_for_mode(ep.mode))
        env.update(backend.get_process_environment(p))
        if fo is not None:
            env.update(backend.get_failover_environment(p, failover.worker_dir(fo, recipe.name, job, ep.mode, ep.index)))
        if backend.should_set_visible_devices() and (ep.partial_node or fo is not None):
            env[recipe.reconcile.visible_devices_env] = ",".join(map(str, ep.gpus))
        if mooncake is not None:
            env = mooncake.stamp(ep.mode, p.node, env)
        argv = pre + backend.build_worker_command(p, role_runtime)
        if srun.per_process:
            nodes, ntasks = (p.node,), 1
        else:
            nodes, ntasks = p.hosts, backend.process_ntasks(p)
        if recipe.reconcile.network_interface:
            # srtctl passes IPs on network_interface: each node learns its own at launch
            argv, env = netaddr.resolve_at_launch(
                argv, env, worker_hosts, recipe.reconcile.network_interface, f"{runtime.config_dir}/addr",
                nodes[0] if len(nodes) == 1 else None)
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
    return Unit(
        recipe=recipe.name, role=ep.role, index=ep.index, ordinals=ep.nodes, nodes=hosts, gpus=ep.gpus,
        ports=dict(ps[0].ports), launches=launches_t, container=role_container, files=files,
        health_port=ps[0].ports.get(probe.port_name), health_path=probe.path, slot=ep.slot,
        metrics_path=backend.prometheus_metrics_path, fatal_patterns=patterns, probe=probe.kind,
        srun_options=srun_opts, spec_hash=spec_hash(launches_t, role_container, files, srun_opts),
        scheme="grpc" if backend.is_grpc_mode() else "http", needs=needs,
    )


def nvtx_preset(recipe: Recipe) -> bool:
    """srtctl's automatic nsys preset is on: ``observability.enabled`` and ``observability.nsys``
    not switched off. The workers then get their engine's NVTX environment (no capture runs here)."""
    obs = recipe.observability
    return obs.enabled and obs.nsys.get("enabled", True) is not False


def _container(recipe: Recipe, backend) -> str | None:
    return recipe.model.container if _containers_allowed(recipe, backend) else None


def endpoints_path(state_dir: Path, recipe: str) -> Path:
    return Path(state_dir).absolute() / recipe / "endpoints.json"


def node_count(recipe: Recipe) -> int:
    from reconciler.recipe.topology import allocate

    _, n = allocate(recipe.role_layouts(), recipe.resources.gpus_per_node, recipe.resources.spread_workers)
    return n
