"""The engine workers' unit source: one unit per engine of every placed worker (``1 +
shadow_engines`` under ``engine.failover``), each buildable in either life slot — a slot-1 life
of a GPU engine runs on the mirror GPUs (``core.slots.in_slot``). A unit has one launch (srun
step) per node for per-process engines, one spanning all nodes for MPI engines.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from reconciler.backends.base import Backend, HealthProbe, Ports, Runtime, SrunConfig
from reconciler.backends.failover import RENDER_JOB, config_of, engines_per_worker, worker_dir
from reconciler.backends.registry import Engines, engines
from reconciler.core.slots import in_slot, layout_gpus
from reconciler.backends import dynamo_install
from reconciler.desired import netaddr, preambles
from reconciler.desired.context import Context
from reconciler.desired.runtime import (DIRECT_FRONTENDS, MODEL_MOUNT, _container, _containers_allowed, _model_mount,
                                        nvtx_preset)
from reconciler.desired.services import per_worker
from reconciler.desired.services.mooncake import Wiring
from reconciler.desired.services.units import mooncake_wiring
from reconciler.desired.sources.base import Life, Offer
from reconciler.labels import engine_role
from reconciler.recipe.model import Recipe
from reconciler.recipe.topology import Endpoint, Mode, Process
from reconciler.recipe.failover import FailoverConfig
from reconciler.frozen import evolve
from reconciler.world import Launch, RestartPolicy, Unit

# what srtctl's worker stage sets on every dynamo.* worker, under the recipe's env (cli/mixins/worker_stage.py)
DYNAMO_WORKER_ENV = {"DYN_LOG": "info,dynamo_runtime::pipeline::network::ingress::push_handler=warn",
                     "DYN_SKIP_SGLANG_LOG_FORMATTING": "1"}



def offer(ctx: Context, earlier: tuple[Unit, ...]) -> Offer:
    recipe, top, where = ctx.recipe, ctx.top, ctx.where
    specs = list(top.services)
    placed = ctx.workers
    workers = [(ep.mode, ep.index) for ep in placed]
    needs = per_worker.needs(specs, workers)
    wiring = mooncake_wiring(recipe, specs, top.facts.store, where.head, ctx.ports, ctx.runtime.config_dir,
                             ctx.runtime.served_model_name, ctx.dedicated_host)
    layout = layout_gpus(top.endpoints)
    # only nodes that run a worker here publish their address (netaddr); others keep their name
    worker_hosts = sorted({where.hosts[n] for ep in placed for n in ep.nodes})
    lives, job_of = [], {}
    roles: dict[str, RoleFacts] = {}  # what each role's workers share, computed for its first one
    for ep in placed:
        job = where.job_of(ep)
        gpu_engine = ctx.backends.of(ep.mode).needs_gpus()
        held = where.held_gpus.get((ep.mode, ep.index), 0)
        for k in range(top.engines):
            e = ep if ep.engine == k else evolve(ep, engine=k)
            job_of[(e.role, e.index)] = job

            def build(slot: int, e: Endpoint = e, gpu: bool = gpu_engine, held: int = held) -> Unit:
                return worker_unit(recipe, in_slot(e, slot, gpu, layout, held), where.hosts, ctx.ports, ctx.runtime,
                                   ctx.discovery_env, wiring, job_of[(e.role, e.index)],
                                   needs.get((e.mode, e.index), ()), worker_hosts, ctx.backends, roles)

            def gpus(slot: int, e: Endpoint = e, gpu: bool = gpu_engine, held: int = held) -> tuple[int, ...]:
                return in_slot(e, slot, gpu, layout, held).gpus

            # a failover worker's engines share one gms and directory: replaced in place, never surged
            lives.append(Life((e.role, e.index), build, slotted=True, surges=top.engines == 1, gpus=gpus,
                              exclusive_gpus=gpu_engine))
    waiting = [*where.waiting, *(() if ctx.addresses_known else workers_of(where.placed))]
    waiting += [(engine_role(m, k), i) for m, i in list(waiting) for k in range(1, top.engines)]
    return Offer(tuple(lives), tuple(waiting), job_of, restart_policies(recipe, top.engines))


def workers_of(eps) -> list[tuple[str, int]]:
    return [(ep.mode, ep.index) for ep in eps]


def restart_policies(recipe: Recipe, engines: int) -> dict[str, RestartPolicy]:
    """Per engine role: the role's policy (every engine of a worker alike)."""
    out = {}
    fo = config_of(recipe)
    for m, r in recipe.roles.items():
        policy = RestartPolicy(**r.restart.model_dump())
        if fo is not None and fo.policy is not None:  # the corpus example's engine.failover.restart
            policy = replace(policy, policy=fo.policy)
        if fo is not None and fo.restart_backoff_seconds is not None:
            policy = replace(policy, backoff_seconds=fo.restart_backoff_seconds)
        out |= {engine_role(m, k): policy for k in range(engines)}
    return out


def worker_units(
    recipe: Recipe,
    endpoints: list[Endpoint],
    hostnames: Mapping[int, str],
    ports: Ports,
    runtime: Runtime,
    extra_env: Mapping[str, str] | None = None,
    mooncake: Wiring | None = None,
) -> list[Unit]:
    """The units of ``endpoints`` as they stand, every engine of each (the pipeline builds them one
    at a time, in their life slots: ``desired/sources/workers.py``)."""
    count = engines_per_worker(recipe)
    eps = [replace(ep, engine=k) for ep in endpoints for k in range(count)]
    hosts = sorted({hostnames[n] for ep in eps for n in ep.nodes})
    bound = engines(recipe)
    roles: dict[str, RoleFacts] = {}
    return [worker_unit(recipe, ep, hostnames, ports, runtime, extra_env, mooncake, RENDER_JOB, (), hosts, bound, roles)
            for ep in eps]


def worker_unit(recipe: Recipe, ep: Endpoint, hostnames: Mapping[int, str], ports: Ports, runtime: Runtime,
                extra_env: Mapping[str, str] | None, mooncake: Wiring | None, job: str,
                needs: tuple[tuple[str, int], ...], worker_hosts: list[str], bound: Engines,
                roles: dict[str, RoleFacts] | None = None) -> Unit:
    """One engine of one worker (all of whose node ordinals must be in ``hostnames``), run by its
    role's backend in ``bound`` (the recipe's, bound once per build);
    ``extra_env``: the discovery environment of a Dynamo recipe, under the recipe's own;
    ``mooncake``: the Mooncake master's wiring, over everything else; ``job`` names a failover
    worker's shared directory, ``needs`` what must be Ready before it; ``worker_hosts``: every
    node that runs a worker now (they publish their addresses, ``netaddr``). Its spec hash is
    the pipeline's last pass (``desired/passes.py``). ``roles``: what the build's workers of
    each role share (``RoleFacts``), filled by the first of them."""
    ps = bound.of(ep.mode).endpoints_to_processes([ep], hostnames, ports, f"{recipe.name}/")  # type: ignore[arg-type]
    if recipe.frontend.port and recipe.frontend.type in DIRECT_FRONTENDS and ep.name == "agg_0":
        # the worker is the recipe's public endpoint: it serves on frontend.port (srtctl: 8000)
        ps = [replace(ps[0], ports={**ps[0].ports, "http": recipe.frontend.port}), *ps[1:]]
    return _worker_unit(recipe, ep, ps, hostnames, runtime, extra_env, mooncake, job, needs, worker_hosts, bound, roles)


@dataclass(frozen=True)
class RoleFacts:
    """What every worker of one role gets alike in a build: its backend, launch, container, files,
    preamble, runtime and the environment under each process's own. Computed for the role's first
    worker and reused by the others (``roles``, a memo one build passes to its workers), not again
    per worker: at 10,000 workers this was a tenth of the build (docs/performance.md)."""

    backend: Backend
    srun: SrunConfig
    container: str | None  # the role's container, None on the hosts
    files: Mapping[str, str]
    pre: tuple[str, ...]  # setup script and Dynamo install before the command
    runtime: Runtime  # the role's: the model's host path when the role runs on the host
    env: Mapping[str, str]  # Dynamo's, the discovery env, NVTX, the recipe's, the role's: in that order
    role_srun: Mapping[str, str]  # the recipe's srun options, then the role's
    failover: FailoverConfig | None  # engine.failover (every role's engines alike)
    probe: HealthProbe
    patterns: tuple[str, ...]  # fatal log patterns: the engine's (when the recipe marks them), the recipe's
    metrics_path: str | None
    scheme: str  # how a router reaches the role's workers: grpc or http


def role_facts(recipe: Recipe, mode: str, runtime: Runtime, extra_env: Mapping[str, str] | None,
               mooncake: Wiring | None, bound: Engines) -> RoleFacts:
    backend = bound.of(mode)
    srun = backend.get_srun_config()
    container = _container(recipe, backend)
    container_ok = _containers_allowed(recipe, backend)
    role = recipe.roles[mode]
    files = backend.config_files(mode, runtime)  # type: ignore[arg-type]
    if mooncake is not None:
        files = {**files, **mooncake.files.get(mode, {})}
    role_container = (role.container or container) if container_ok else None
    # srtctl installs the recipe's Dynamo into the container first; on the hosts it is there already
    pre = preambles.setup_script(recipe, bool(role_container))
    pre += dynamo_install.preamble(recipe) if role_container else []
    role_runtime = runtime
    if not role_container and runtime.model_path == MODEL_MOUNT and _model_mount(recipe, bound.serving):
        role_runtime = replace(runtime, model_path=recipe.model.path)  # this role runs on the host
    env = dict(DYNAMO_WORKER_ENV) if recipe.frontend.type == "dynamo" else {}
    env.update(extra_env or {})
    if nvtx_preset(recipe):
        env.update(backend.nvtx_environment)  # under the recipe's and the role's own
    env.update(recipe.environment)
    env.update(backend.get_environment_for_mode(mode))  # type: ignore[arg-type]
    m: Mode = mode  # type: ignore[assignment]
    patterns = tuple(backend.fatal_log_patterns(m)) if recipe.health_check.fatal_log_markers else ()
    patterns += tuple(recipe.health_check.extra_fatal_log_patterns)
    return RoleFacts(backend, srun, role_container, files, tuple(pre), role_runtime, env,
                     {**recipe.srun_options, **role.srun_options}, config_of(recipe), backend.health_probe(m),
                     patterns, backend.prometheus_metrics_path, "grpc" if backend.is_grpc_mode() else "http")


def _worker_unit(recipe: Recipe, ep: Endpoint, ps: list[Process], hostnames: Mapping[int, str], runtime: Runtime,
                 extra_env: Mapping[str, str] | None, mooncake: Wiring | None, job: str,
                 needs: tuple[tuple[str, int], ...], worker_hosts: list[str], bound: Engines,
                 roles: dict[str, RoleFacts] | None = None) -> Unit:
    """``roles``: the role facts this build computed so far (filled here), shared by its workers."""
    rf = roles.get(ep.mode) if roles is not None else None
    if rf is None:
        rf = role_facts(recipe, ep.mode, runtime, extra_env, mooncake, bound)
        if roles is not None:
            roles[ep.mode] = rf
    backend, srun, fo = rf.backend, rf.srun, rf.failover
    pre = list(rf.pre)
    visible, mask = recipe.reconcile.visible_devices_env, ",".join(map(str, ep.gpus))
    launches = []
    for p in ps:
        env = dict(rf.env)
        env.update(backend.get_process_environment(p))
        if fo is not None:
            env.update(backend.get_failover_environment(p, worker_dir(fo, recipe.name, job, ep.mode, ep.index)))
        if backend.should_set_visible_devices() and (ep.partial_node or fo is not None):
            env[visible] = mask  # logical: the step maps it onto the job's GPUs (visible_env below)
        if mooncake is not None:
            env = mooncake.stamp(ep.mode, p.node, env)
        for name in backend.env_unset(p):  # srtctl's env_to_unset: gone whoever set it
            env.pop(name, None)
        argv = pre + backend.build_worker_command(p, rf.runtime)
        if srun.per_process:
            nodes, ntasks = (p.node,), 1
        else:
            nodes, ntasks = p.hosts, backend.process_ntasks(p)
        if recipe.reconcile.network_interface:
            # srtctl passes IPs on network_interface: each node learns its own at launch
            argv, env = netaddr.resolve_at_launch(
                argv, env, worker_hosts, recipe.reconcile.network_interface, f"{runtime.config_dir}/addr",
                nodes[0] if len(nodes) == 1 else None)
        launches.append(Launch(p.node_rank, nodes, ntasks, srun.mpi, tuple(argv), tuple(sorted(env.items())), ep.gpus,
                               visible_env=visible if env.get(visible) == mask else ""))
    launches_t = tuple(launches)
    probe = rf.probe
    hosts = tuple(hostnames[n] for n in ep.nodes)
    # the container's own flags and mounts go under these: desired/passes.py:wrap
    merged = {**backend.srun_options(ep), **rf.role_srun}
    srun_opts = tuple(sorted(merged.items()))
    return Unit(
        recipe=recipe.name, role=ep.role, index=ep.index, ordinals=ep.nodes, nodes=hosts, gpus=ep.gpus,
        ports=dict(ps[0].ports), launches=launches_t, container=rf.container, files=dict(rf.files),
        health_port=ps[0].ports.get(probe.port_name), health_path=probe.path, slot=ep.slot,
        metrics_path=rf.metrics_path, fatal_patterns=rf.patterns, probe=probe.kind, srun_options=srun_opts,
        scheme=rf.scheme, needs=needs,
    )
