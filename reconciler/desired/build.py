"""The desired state, in one pass: the stages in order, then ``DesiredRecipe``. Pure: no I/O
(paths under ``state_dir`` are only named); ``ports`` is the tick's port assignment (a copy of
the registry the caller owns and may throw away), so the same unit on the same node keeps its
ports.

    recipe ──topology──▶ Topology          workers over node ordinals, services, dedicated node
           ──placement─▶ Placement         onto observed allocations: hosts, jobs, what waits
           ──context───▶ Context           runtime, container, discovery env: computed once
           ──sources───▶ Offer per source  SOURCES, in start order; each unit as a Life
           ──passes────▶ units             life slots (surge, hand-over), preamble, spec hash
           ──assemble──▶ DesiredRecipe

A stage never calls back into an earlier one; a source sees the context and the units the
sources before it made (the frontend routes to the workers), never another source.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from reconciler.core.plan.dependents import graph
from reconciler.core.ports import NodePortAllocator, PortsExhausted
from reconciler.desired.analysis import analysis_spec
from reconciler.desired.baseline import running_packing
from reconciler.desired.context import Context, context
from reconciler.desired.passes import live
from reconciler.desired.placement import Placement, placement
from reconciler.desired.sources import benchmark, frontend, per_worker, services, workers
from reconciler.desired.scale import Scale
from reconciler.desired.services import per_worker as svc_per_worker
from reconciler.desired.sources.base import Source
from reconciler.desired.topology import generation, topology
from reconciler.labels import engine_role
from reconciler.recipe.model import Recipe
from reconciler.timefmt import slurm_seconds
from reconciler.world import Alloc, Desired, DesiredRecipe, Observed, Step, Unit

# Every kind of process a recipe runs, in start order. Adding one: its source module plus a line here.
SOURCES: tuple[Source, ...] = (
    Source("services", "services", services.offer),  # etcd, NATS, the Mooncake master, generic (shared)
    Source("workers", "workers", workers.offer),  # the engines (with failover engines)
    Source("per-worker services", "services", per_worker.offer),  # gms and other sidecars, one per worker
    Source("frontend", "frontend", frontend.offer),  # the router in front of the workers
    Source("benchmark", "services", benchmark.offer),  # reconcile.benchmark: run-once aiperf against the endpoint
)


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
    scale: Mapping[str, Scale] | None = None,
) -> Desired:
    """``ports`` is this build's port assignment: ports are handed out into it. ``cache`` (kept
    by the caller across ticks) skips rebuilding a recipe whose spec, allocations and assigned
    ports did not change: its units (argv, ports, hashes) are then the same.

    A recipe whose desired state cannot be computed (e.g. no free port left) is *held*:
    left out, and named in ``Desired.held`` so that plan() does not mistake it for a
    deleted recipe. What it runs keeps running. ``hold``: names held from the start (their
    file cannot be read into a spec). ``suspended``: names suspended by ``reconciler suspend``
    (``reconcile.suspend`` in the file is the other way): fully computed, marked, never acted on.
    ``scale``: the autoscaler's counts and draining workers per recipe (desired/scale.py)."""
    out = {}
    held: dict[str, str] = {n: why for n, why in (hold or {}).items() if n not in recipes}
    owned = ports.owned_index()  # each recipe's ports before any is built (a build takes only its own)
    for name, r in recipes.items():
        allocs = observed.allocs_of(name)
        before = owned.get(name, ())
        sc = (scale or {}).get(name)
        try:
            steps = observed.steps_of(name)
            if cache is None:
                out[name] = build_recipe(r, allocs, ports, state_dir, python, steps, sc)
            else:
                out[name] = _cached(cache, r, allocs, steps, ports, state_dir, python, before, sc)
            if sc is not None and (sc.draining or sc.spares):  # out of the routers, still running
                out[name] = replace(out[name], draining=sc.draining, spares=sc.spares)
            if name in suspended or r.reconcile.suspend:
                out[name] = replace(out[name], suspended=True)  # fully computed, never acted on
        except PortsExhausted as e:
            held[name] = f"{type(e).__name__}: {e}"
            ports.release_taken_since(name, before)  # what runs keeps its ports; the half-built rest is freed
        except Exception as e:  # noqa: BLE001 - one recipe's failure must not stop the others
            held[name] = f"cannot compute its desired state: {type(e).__name__}: {e}"
            ports.release_taken_since(name, before)
    if cache is not None:
        for gone in set(cache) - set(recipes):
            del cache[gone]
    return Desired(out, manifests_seen, held, allow_empty)


def _cached(cache: dict, r: Recipe, allocs: list[Alloc], steps: list[Step], ports: NodePortAllocator,
            state_dir: Path, python: str, owned: tuple, sc: Scale | None = None) -> DesiredRecipe:
    """The cached build while its spec, allocations, ports (``owned``: what it holds now) and the
    life slots and specs its steps run (which pick each worker's slot) are unchanged."""
    name = r.name
    hit = cache.get(name)
    # the same spec object as last time (the manifest cache hands out the same one): same generation
    gen = hit[0][0] if hit is not None and hit[2] is r else generation(r)
    lives = frozenset((s.role, s.index, s.slot, s.job_id, s.spec_hash) for s in steps)
    key = (gen, tuple(sorted((a.job_id, a.index, a.start, a.count, a.state, a.nodes) for a in allocs)), lives,
           sc.key() if sc else (), owned)
    if hit is None or hit[0] != key:
        built = build_recipe(r, allocs, ports, state_dir, python, steps, sc)
        hit = ((*key[:4], ports.owned_by_recipe(name)), built, r)  # the ports it now holds
        cache[name] = hit
    elif hit[2] is not r:
        cache[name] = (hit[0], hit[1], r)
    return hit[1]


def build_recipe(
    recipe: Recipe, allocs: list[Alloc], ports: NodePortAllocator, state_dir: Path, python: str,
    steps: list[Step] | None = None, sc: Scale | None = None,
) -> DesiredRecipe:
    """``steps``: the recipe's observed steps; they tell each unit's life slot (``core.slots``).
    ``sc``: the autoscaler's counts, which the topology stage builds the recipe at."""
    steps = steps or []
    # the live allocations' labels say what they were packed for: an edit's added workers go beside them
    top = topology(recipe, counts=sc.counts if sc else None, packed=running_packing(allocs))
    where = placement(top, allocs, steps)
    return assemble(context(top, where, ports, state_dir, python, steps))


def assemble(ctx: Context) -> DesiredRecipe:
    """Every source's offer through the passes, into the recipe's desired state."""
    recipe, top, where = ctx.recipe, ctx.top, ctx.where
    rollout = recipe.reconcile.rollout
    made: dict[str, list[Unit]] = {"services": [], "workers": [], "frontend": []}
    earlier: tuple[Unit, ...] = ()
    waiting: list[tuple[str, int]] = []
    job_of: dict[tuple[str, int], str] = {}
    restart, gates, previous, no_room = {}, {}, {}, frozenset()
    for source in SOURCES:
        offer = source.offer(ctx, earlier)
        job_of |= offer.job_of
        lived = live(offer.lives, recipe, ctx.steps, job_of, ctx.ports, rollout.max_surge, ctx.container_srun)
        made[source.kind] += lived.units
        earlier += lived.units
        waiting += offer.waiting
        restart |= offer.restart
        gates |= offer.gates
        previous |= lived.previous
        no_room |= lived.no_room
    engines = top.engines
    return DesiredRecipe(
        name=recipe.name, generation=top.generation, allocs=where.allocs, keep_allocs=where.keep,
        units=tuple(made["workers"]), waiting=tuple(waiting), frontend=next(iter(made["frontend"]), None),
        extra_frontends=tuple(made["frontend"][1:]),
        # a failover worker's engines share one gms: never surged, so rolled one at a time at least
        max_unavailable=rollout.max_unavailable if engines == 1 else max(1, rollout.max_unavailable),
        unplaceable=where.unplaceable, job_of=job_of, pending_reason=where.pending_reason, restart=restart,
        startup_grace=recipe.health_check.max_attempts * recipe.health_check.interval_seconds,
        liveness_failures=recipe.reconcile.liveness_failures, liveness_seconds=recipe.reconcile.liveness_seconds,
        services=tuple(made["services"]), gates=gates,
        max_surge=rollout.max_surge if engines == 1 else 0, surge_pickup_seconds=rollout.pickup_seconds,
        surge_drain_seconds=rollout.drain_seconds, previous=previous, no_room=no_room,
        surge_allocs=_surge_allocs(where, no_room) if rollout.max_unavailable == 0 else {},
        resize_allocs=where.resize, undersized_allocs=where.undersized, resizing=_resizing(ctx),
        handover_seconds=recipe.reconcile.handover_seconds, time_limit_seconds=slurm_seconds(recipe.slurm.time_limit),
        analysis=analysis_spec(ctx), served_model=ctx.runtime.served_model_name,
        min_available=recipe.reconcile.min_available,
        # who reads each service's address: once per build (kept with the build cache), not per plan
        dependents=graph(made["services"], (*made["services"], *made["workers"], *made["frontend"])),
    )


def _resizing(ctx: Context) -> frozenset[str]:
    """Every unit of a worker that waits for its resize successor: its engines (agg-e1_0) and its
    per-worker services (svc-gms-agg_0) share its GPUs and its job, so none is rolled or relaunched
    on the job too small for the new spec either (the frozen engines' gms would go under them)."""
    specs = list(ctx.top.services)
    out = set(ctx.where.resizing)
    for name in ctx.where.resizing:
        mode, _, i = name.rpartition("_")
        out |= {f"{engine_role(mode, k)}_{i}" for k in range(ctx.top.engines)}
        out |= {f"{r}_{n}" for r, n in svc_per_worker.instance_keys(specs, mode, int(i))}
    return frozenset(out)


def _surge_allocs(where: Placement, no_room: frozenset[str]) -> dict[int, tuple[tuple[str, int], ...]]:
    """Allocation index -> its workers that wait for a surge allocation (no GPUs for a second life)."""
    out: dict[int, tuple[tuple[str, int], ...]] = {}
    for k, a in sorted(where.at.items()):
        if f"{k[0]}_{k[1]}" in no_room:
            out[a.index] = (*out.get(a.index, ()), k)
    return out
