"""Recipes + observed allocations -> the desired world.

Allocation placement rule: observed live allocations keep covering the node
ordinals they were submitted for (their comment says which); ordinals that no
live allocation covers go to new allocations, cut at worker boundaries and at
``reconcile.nodes_per_allocation``. A worker is placed only when the allocation
that covers all its ordinals runs; until then it is *waiting*. Ports come from
the tick's port assignment (a copy of the registry the caller owns and may throw
away), so the same worker on the same node keeps its ports. No I/O: paths under
``state_dir`` are only named, never touched.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path
from collections.abc import Mapping

from reconciler.core.ports import NodePortAllocator, PortsExhausted
from reconciler.recipe.model import Recipe
from reconciler.recipe.topology import Endpoint
from reconciler.desired.frontends import frontend_unit
from reconciler.desired.services import discovery_of, resolve
from reconciler.backends import failover
from reconciler.labels import engine_role
from reconciler.desired.services import per_worker
from reconciler.desired.services.units import (ADDRESSED_KINDS, dedicated_ordinal, discovery_env, host_of,
                                       instance_ordinals, mooncake_wiring, service_units)
from reconciler.desired.preambles import with_cluster_preamble
from reconciler.desired.units import _container, runtime_for
from reconciler.world import FRONTEND
from reconciler.core.succession import generations
from reconciler.timefmt import slurm_seconds
from reconciler.desired.lives import frontend_life, worker_lives
from reconciler.world import Alloc, AllocSpec, Desired, DesiredRecipe, Observed, RestartPolicy, Step
from reconciler.backends.registry import backend_of, endpoints_of


# the frontend and the services: cheap to restart, and every request goes through them
FAST_RESTART = RestartPolicy(backoff_seconds=1.0, max_backoff_seconds=30.0)


def generation(recipe: Recipe) -> str:
    doc = recipe.model_dump(mode="json", by_alias=True)
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:12]


def build(
    recipes: Mapping[str, Recipe],
    observed: Observed,
    ports: NodePortAllocator,
    state_dir: Path,
    python: str,
    manifests_seen: int,
    cache: dict[str, tuple[tuple, DesiredRecipe]] | None = None,
    allow_empty: bool = False,
    hold: Mapping[str, str] | None = None,
    suspended: frozenset[str] = frozenset(),
) -> Desired:
    """``ports`` is this build's port assignment: ports are handed out into it. ``cache`` (kept
    by the caller across ticks) skips rebuilding a recipe whose spec, allocations and assigned
    ports did not change: its units (argv, ports, hashes) are then the same.

    A recipe whose desired state cannot be computed (e.g. no free port left) is *held*:
    left out, and named in ``Desired.held`` so that plan() does not mistake it for a
    deleted recipe. What it runs keeps running. ``hold``: names held from the start (their
    file cannot be read into a spec). ``suspended``: names suspended by ``reconciler suspend``
    (``reconcile.suspend`` in the file is the other way): fully computed, marked, never acted on."""
    out = {}
    held: dict[str, str] = {n: why for n, why in (hold or {}).items() if n not in recipes}
    owned = ports.owned_index() if cache is not None else {}
    for name, r in recipes.items():
        allocs = observed.allocs_of(name)
        try:
            steps = observed.steps_of(name)
            if cache is None:
                out[name] = build_recipe(r, allocs, ports, state_dir, python, steps)
            else:
                out[name] = _cached(cache, r, allocs, steps, ports, state_dir, python, owned.get(name, ()))
            if name in suspended or r.reconcile.suspend:
                out[name] = replace(out[name], suspended=True)  # fully computed, never acted on
        except PortsExhausted as e:
            held[name] = f"{type(e).__name__}: {e}"
        except Exception as e:  # noqa: BLE001 - one recipe's failure must not stop the others
            held[name] = f"cannot compute its desired state: {type(e).__name__}: {e}"
    if cache is not None:
        for gone in set(cache) - set(recipes):
            del cache[gone]
    return Desired(out, manifests_seen, held, allow_empty)


def _cached(cache: dict, r: Recipe, allocs: list[Alloc], steps: list[Step], ports: NodePortAllocator,
            state_dir: Path, python: str, owned: tuple) -> DesiredRecipe:
    """The cached build while its spec, allocations, ports (``owned``: what it holds now) and the
    life slots and specs its steps run (which pick each worker's slot) are unchanged."""
    name = r.name
    hit = cache.get(name)
    # the same spec object as last time (the manifest cache hands out the same one): same generation
    gen = hit[0][0] if hit is not None and hit[2] is r else generation(r)
    lives = frozenset((s.role, s.index, s.slot, s.job_id, s.spec_hash) for s in steps)
    key = (gen, tuple(sorted((a.job_id, a.index, a.start, a.count, a.state, a.nodes) for a in allocs)), lives, owned)
    if hit is None or hit[0] != key:
        built = build_recipe(r, allocs, ports, state_dir, python, steps)
        hit = ((*key[:3], ports.owned_by_recipe(name)), built, r)  # the ports it now holds
        cache[name] = hit
    elif hit[2] is not r:
        cache[name] = (hit[0], hit[1], r)
    return hit[1]


def build_recipe(
    recipe: Recipe, allocs: list[Alloc], ports: NodePortAllocator, state_dir: Path, python: str,
    steps: list[Step] | None = None,
) -> DesiredRecipe:
    """``steps``: the recipe's observed steps; they tell each worker's life slot (``core.slots``)."""
    steps = steps or []
    gen = generation(recipe)
    rollout = recipe.reconcile.rollout
    endpoints = endpoints_of(recipe)
    live, successors, retiring = generations([a for a in allocs if a.live], steps)
    svc_specs = resolve(recipe)
    ded_node = dedicated_ordinal(recipe, svc_specs)
    # srtctl's dedicated node: held by an allocation like a worker's node, no worker placed on it
    reserved = [Endpoint("dedicated", 0, (ded_node,), (), recipe.resources.gpus_per_node)] \
        if ded_node is not None else []
    specs, keep, placement, unplaceable = place(recipe, endpoints + reserved, live)
    kept = {a.index for a in live if a.job_id in keep}
    # a successor (hand-over) is kept beside the job it follows; an older job until its last step is gone
    keep += [j for i in sorted(kept) for j in successors.get(i, ())] + retiring
    spec_gpus = {s.index: s.gpus_per_node for s in specs}
    runtime = runtime_for(recipe, state_dir, python)
    placed: list[Endpoint] = []
    hostnames: dict[int, str] = {}
    job_of: dict[tuple[str, int], str] = {}
    waiting: list[tuple[str, int]] = []
    for ep in endpoints:
        alloc = placement.get((ep.mode, ep.index))
        if alloc is None or not alloc.running:
            if ep.name not in unplaceable:
                waiting.append((ep.mode, ep.index))
            continue
        for o in ep.nodes:
            hostnames[o] = alloc.nodes[o - alloc.start]
        placed.append(ep)
        job_of[(ep.mode, ep.index)] = alloc.job_id
    head_alloc = next((a for a in live if a.covers((0,))), None)
    head = head_alloc.nodes[0 - head_alloc.start] if head_alloc is not None and head_alloc.running else None
    engines = failover.engines_per_worker(recipe)
    on = {o: a for a in live if a.running for o in range(a.start, a.start + len(a.nodes))}
    ded = on[ded_node].nodes[ded_node - on[ded_node].start] if ded_node in on else None
    disc_env = discovery_env(recipe, svc_specs, discovery_of(recipe), head, ports, state_dir, ded)
    if any(s.kind in ADDRESSED_KINDS and not s.external and host_of(s, head, ded) is None for s in svc_specs):
        # their etcd/NATS/Mooncake address is the head node's: without it their spec is unknown, and
        # what runs elsewhere is left alone (waiting) rather than rolled to a spec without it
        waiting += [(ep.mode, ep.index) for ep in placed]
        placed = []
    wiring = mooncake_wiring(recipe, svc_specs, head, ports, runtime.config_dir, runtime.served_model_name, ded)
    held_gpus = {k: spec_gpus.get(a.index, 0) for k, a in placement.items()}
    workers = [(ep.mode, ep.index) for ep in placed]
    units, previous, no_room = worker_lives(recipe, placed, hostnames, ports, runtime, disc_env, wiring, steps,
                                            job_of, held_gpus, per_worker.needs(svc_specs, workers))
    # a failover worker's other engines and every per-worker service instance live with the worker
    for mode, i in [*workers, *list(waiting)]:
        extra = [(engine_role(mode, k), i) for k in range(1, engines)] + per_worker.instance_keys(svc_specs, mode, i)
        if (mode, i) in workers:
            job_of.update({k: job_of[(mode, i)] for k in extra})
        else:
            waiting += extra
    attached = per_worker.units(recipe, svc_specs, units, head, state_dir, disc_env,
                                _container(recipe, backend_of(recipe)), job_of)
    fe = None
    services: list = []
    if head is not None:
        job_of[(FRONTEND, 0)] = head_alloc.job_id  # type: ignore[union-attr]
        fe, old_fe = frontend_life(lambda slot: with_cluster_preamble(frontend_unit(
            recipe, head, ports, runtime, state_dir, disc_env, units, slot), recipe), steps, job_of,
            rollout.max_surge, ports)
        if old_fe is not None:
            previous = {**previous, (FRONTEND, 0): old_fe}
        services = service_units(recipe, svc_specs, head, ports, state_dir, disc_env, _container(recipe, backend_of(recipe)),
                                 {o: a.nodes[o - a.start] for o, a in on.items()})
        for u in services:
            job_of[(u.role, u.index)] = on.get(u.ordinals[0], head_alloc).job_id  # type: ignore[union-attr]
        built = {(u.role, u.index) for u in services}
        waiting += [k for k in _instances(recipe, svc_specs) if k not in built]  # their node is not running yet
    else:
        waiting += _instances(recipe, svc_specs)
    services += attached
    gates: dict[str, tuple[str, ...]] = {}
    for s in svc_specs:
        if not s.external and not s.per_worker:  # a per-worker instance gates its own worker (Unit.needs)
            gates[s.phase] = (*gates.get(s.phase, ()), s.role)
    # the cluster's default_bash_preamble before every container step (srtctl); a no-op without one
    # (workers and the frontend get it where they are built: their spec hashes pick their life slots)
    services = [with_cluster_preamble(u, recipe) for u in services]
    pending = "; ".join(f"allocation {a.index} (job {a.job_id}) {a.state.lower()}: {a.reason}"
                        for a in live if not a.running and a.reason and a.reason != "None")
    return DesiredRecipe(
        name=recipe.name, generation=gen, allocs=tuple(specs), keep_allocs=tuple(keep), units=tuple(units),
        # a failover worker's engines share one gms: never surged, so rolled one at a time at least
        waiting=tuple(waiting), frontend=fe,
        max_unavailable=rollout.max_unavailable if engines == 1 else max(1, rollout.max_unavailable),
        unplaceable=tuple(unplaceable), job_of=job_of, pending_reason=pending,
        restart=_restart_policies(recipe, svc_specs, engines),
        startup_grace=recipe.health_check.max_attempts * recipe.health_check.interval_seconds,
        liveness_failures=recipe.reconcile.liveness_failures, services=tuple(services), gates=gates,
        max_surge=rollout.max_surge if engines == 1 else 0, surge_pickup_seconds=rollout.pickup_seconds,
        surge_drain_seconds=rollout.drain_seconds, previous=previous, no_room=no_room,
        surge_allocs=_surge_allocs(placement, no_room) if rollout.max_unavailable == 0 else {},
        handover_seconds=recipe.reconcile.handover_seconds, time_limit_seconds=slurm_seconds(recipe.slurm.time_limit),
    )


def _restart_policies(recipe: Recipe, specs: list, engines: int) -> dict[str, RestartPolicy]:
    """Per unit role: a worker's (each of its engines alike), the frontend's and the services'."""
    out = {}
    fo = failover.config_of(recipe)
    for m, r in recipe.roles.items():
        policy = RestartPolicy(**r.restart.model_dump())
        if fo is not None and fo.policy is not None:  # the corpus example's engine.failover.restart
            policy = replace(policy, policy=fo.policy)
        if fo is not None and fo.restart_backoff_seconds is not None:
            policy = replace(policy, backoff_seconds=fo.restart_backoff_seconds)
        out |= {engine_role(m, k): policy for k in range(engines)}
    roles = [FRONTEND, *(s.role for s in specs)]
    roles += [per_worker.instance_role(s, m) for s in specs for m in s.worker_roles]
    return out | {r: FAST_RESTART for r in roles}


def _surge_allocs(placement: Mapping, no_room: frozenset[str]) -> dict[int, tuple[tuple[str, int], ...]]:
    out: dict[int, tuple[tuple[str, int], ...]] = {}
    for k, a in sorted(placement.items()):
        if f"{k[0]}_{k[1]}" in no_room:
            out[a.index] = (*out.get(a.index, ()), k)
    return out


def _instances(recipe: Recipe, specs: list) -> list[tuple[str, int]]:
    """(role, index) of every head-, infra-, dedicated- or node-placed service instance (per-worker
    instances live with their worker)."""
    return [(s.role, i) for s in specs if not s.external and not s.per_worker
            for i in range(len(instance_ordinals(recipe, s, specs)))]


def place(
    recipe: Recipe, endpoints: list[Endpoint], live: list[Alloc]
) -> tuple[list[AllocSpec], list[str], dict[tuple[str, int], Alloc], list[str]]:
    """Which allocation holds which worker; which allocations to keep and to submit."""
    gpn = recipe.resources.gpus_per_node
    placement: dict[tuple[str, int], Alloc] = {}
    used_by: dict[str, bool] = {a.job_id: False for a in live}
    covered = {o for a in live for o in range(a.start, a.start + a.count)}
    uncovered: list[Endpoint] = []
    unplaceable: list[str] = []
    for ep in endpoints:
        holder = next((a for a in live if a.covers(ep.nodes)), None)
        if holder is not None:
            placement[(ep.mode, ep.index)] = holder
            used_by[holder.job_id] = True
        elif any(o in covered for o in ep.nodes):
            unplaceable.append(ep.name)  # straddles an existing allocation: the topology changed under it
        else:
            uncovered.append(ep)
    # new allocations for uncovered ordinals, cut at worker boundaries
    gpus_on: dict[int, int] = {}
    for ep in endpoints:
        for o in ep.nodes:
            gpus_on[o] = max(gpus_on.get(o, 0), max(ep.gpus) + 1 if ep.gpus else 0)
    chunk = recipe.reconcile.nodes_per_allocation
    surge = 2 if recipe.reconcile.rollout.surge_gpus else 1  # room for each worker's surge life (mirror GPUs)
    groups: list[list[Endpoint]] = []
    for ep in sorted(uncovered, key=lambda e: (e.nodes[0], e.mode, e.index)):
        if groups:
            g = groups[-1]
            g_start, g_end = min(e.nodes[0] for e in g), max(e.nodes[-1] for e in g)
            contiguous = ep.nodes[0] <= g_end + 1
            fits = chunk is None or max(g_end, ep.nodes[-1]) - g_start + 1 <= chunk
            if contiguous and fits:
                g.append(ep)
                continue
        groups.append([ep])
    taken = {a.index for a in live}
    next_index = 0
    new_specs: list[AllocSpec] = []
    for g in groups:
        while next_index in taken:
            next_index += 1
        start = min(e.nodes[0] for e in g)
        count = max(e.nodes[-1] for e in g) - start + 1
        gpus = max(gpus_on.get(o, 0) for o in range(start, start + count))
        new_specs.append(_spec(recipe, next_index, start, count, min(gpus * surge, gpn)))
        wanted = Alloc("", recipe.name, next_index, start, count, "WANTED")  # not submitted yet: never running
        for e in g:
            placement[(e.mode, e.index)] = wanted
        taken.add(next_index)
    keep = [a.job_id for a in live if used_by[a.job_id]]
    kept_specs = [
        _spec(recipe, a.index, a.start, a.count,
              min(gpn, surge * max((gpus_on.get(o, 0) for o in range(a.start, a.start + a.count)), default=0)))
        for a in live if used_by[a.job_id]
    ]
    return kept_specs + new_specs, keep, placement, unplaceable


def _spec(recipe: Recipe, index: int, start: int, count: int, gpus: int) -> AllocSpec:
    return AllocSpec(
        recipe=recipe.name, index=index, start=start, count=count, gpus_per_node=gpus,
        partition=recipe.slurm.partition, account=recipe.slurm.account, time_limit=recipe.slurm.time_limit,
        directives=tuple(sorted(recipe.sbatch_directives.items())),
    )
