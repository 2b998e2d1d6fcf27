"""Stage 2 of the desired state: topology x observed allocations -> placement. Pure.

Allocation placement rule: observed live allocations keep covering the node ordinals they
were submitted for (their comment says which); ordinals that no live allocation covers go to
new allocations, cut at worker boundaries and at ``reconcile.nodes_per_allocation``. A worker
is placed only when the allocation that covers all its ordinals runs; until then it is
*waiting*. Per allocation index the current job holds the workers; a successor (hand-over)
is kept beside it and an older job until its last step is gone (``core.succession``).
``render_placement`` puts every ordinal on a named node instead: what ``render`` shows.

Each allocation's label says how many GPUs per node it holds (``Alloc.gpus``): a worker is never
placed on a GPU index its job does not hold (it waits, with the reason, for a successor sized for
it: ``resize``, submitted like a hand-over), and a worker's surge
life is put on mirror GPUs only where its job holds them (``held_gpus``). An allocation is sized
by ``NodeLayout.gpus_on`` (the file's packing on the file's ordinals, whatever the autoscaler's
count); each of the autoscaler's extra workers is an allocation of its own (``desired/elastic.py``).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from reconciler.backends.failover import RENDER_JOB
from reconciler.core.succession import generations
from reconciler.desired.services.layout import NodeLayout
from reconciler.desired.topology import Topology
from reconciler.recipe.model import Recipe
from reconciler.recipe.topology import Endpoint
from reconciler.world import Alloc, AllocSpec, Step

Key = tuple[str, int]  # (role, index)


@dataclass(frozen=True)
class Placement:
    allocs: tuple[AllocSpec, ...]  # every allocation the recipe needs
    keep: tuple[str, ...]  # job ids of observed allocations that serve it
    at: Mapping[Key, Alloc]  # worker (and the dedicated node) -> the allocation that holds it (or will)
    unplaceable: Mapping[str, str]  # worker -> why no allocation can hold it (the topology changed under it)
    placed: tuple[Endpoint, ...]  # workers on running allocations
    waiting: tuple[Key, ...]  # workers whose allocation is not running yet
    hosts: Mapping[int, str] = field(default_factory=dict)  # ordinal -> hostname, on running allocations
    jobs: Mapping[int, str] = field(default_factory=dict)  # ordinal -> job id, on running allocations
    head_job: str | None = None  # the job that holds ordinal 0 (the frontend's and the services')
    held_gpus: Mapping[Key, int] = field(default_factory=dict)  # worker -> GPUs per node its allocation holds
    pending_reason: str = ""  # why an allocation is still pending (Slurm's reason)
    resize: Mapping[int, str] = field(default_factory=dict)  # index -> why its job is too small for its workers
    # indices whose job holds fewer GPUs than the file packs there, whatever the count (a queued
    # successor sized for them is kept while the count dips: plan/allocations.py)
    undersized: frozenset[int] = frozenset()
    resizing: frozenset[str] = frozenset()  # workers that wait for the resize successor (placed or not)

    @property
    def head(self) -> str | None:
        """The head node (ordinal 0) when its allocation runs."""
        return self.hosts.get(0)

    def job_of(self, ep: Endpoint) -> str:
        return self.jobs[ep.nodes[0]]


def placement(top: Topology, allocs: list[Alloc], steps: list[Step]) -> Placement:
    recipe = top.recipe
    live, successors, retiring = generations([a for a in allocs if a.live], steps)
    # (allocation index, worker role, index) of every life: agg-e1 is a failover engine of agg; by
    # index, not job, so that a worker not yet moved by a time-limit hand-over counts as serving too
    index_of = {a.job_id: a.index for a in allocs}
    serving = {(index_of[s.job_id], s.role.partition("-")[0], s.index) for s in steps if s.job_id in index_of}
    specs, keep, at, unplaceable, resize, resizing = place(recipe, top.layout, [*top.endpoints, *top.reserved], live,
                                                           serving)
    kept = {a.index for a in live if a.job_id in keep}
    # a successor (hand-over) is kept beside the job it follows; an older job until its last step is gone
    keep += [j for i in sorted(kept) for j in successors.get(i, ())] + retiring
    on = {o: a for a in live if a.running for o in range(a.start, a.start + len(a.nodes))}
    placed, waiting = [], []
    for ep in top.endpoints:
        alloc = at.get((ep.mode, ep.index))
        if alloc is not None and alloc.running:
            placed.append(ep)
        elif ep.name not in unplaceable:
            waiting.append((ep.mode, ep.index))
    head_alloc = next((a for a in live if a.covers((0,))), None)
    spec_gpus = {s.index: s.gpus_per_node for s in specs}
    pending = "; ".join(f"allocation {a.index} (job {a.job_id}) {a.state.lower()}: {a.reason}"
                        for a in live if not a.running and a.reason and a.reason != "None")
    return Placement(
        allocs=tuple(specs), keep=tuple(keep), at=at, unplaceable=unplaceable, placed=tuple(placed),
        waiting=tuple(waiting), hosts={o: a.nodes[o - a.start] for o, a in on.items()},
        jobs={o: a.job_id for o, a in on.items()}, head_job=head_alloc.job_id if head_alloc is not None else None,
        held_gpus={k: _held(spec_gpus.get(a.index, 0), a) for k, a in at.items()}, pending_reason=pending,
        resize=resize, undersized=frozenset(a.index for a in live if a.job_id in keep and _undersized(top.layout, a)),
        resizing=resizing,
    )


def _held(spec: int, a: Alloc) -> int:
    return spec if a.gpus is None else min(spec, a.gpus)


def render_placement(top: Topology, hostnames: list[str]) -> Placement:
    """Every ordinal on ``hostnames`` (one per node the recipe needs), as ``render`` shows it: no
    allocation, and the job id a failover directory names is the placeholder ``<job>``."""
    hosts = dict(enumerate(hostnames))
    return Placement(allocs=(), keep=(), at={}, unplaceable={}, placed=top.endpoints, waiting=(), hosts=hosts,
                     jobs={o: RENDER_JOB for o in hosts}, head_job=RENDER_JOB)


def place(
    recipe: Recipe, lay: NodeLayout, endpoints: list[Endpoint], live: list[Alloc],
    serving: Collection[tuple[int, str, int]] = (),
) -> tuple[list[AllocSpec], list[str], dict[tuple[str, int], Alloc], dict[str, str], dict[int, str], frozenset[str]]:
    """Which allocation holds which worker; which allocations to keep and to submit; which are too
    small for a worker on them (index -> why: a successor sized for it is submitted), and the
    workers that wait for it (``serving``: (allocation index, role, index) of the observed steps: a
    worker with a life at the short job's index (in it, or in the job it is handed over from) stays
    placed there, that life serving until it moves, never rolled)."""
    gpn = recipe.resources.gpus_per_node
    placement: dict[tuple[str, int], Alloc] = {}
    used_by: dict[str, bool] = {a.job_id: False for a in live}
    uncovered: list[Endpoint] = []
    unplaceable: dict[str, str] = {}
    resize: dict[int, str] = {}
    resizing: set[str] = set()
    frozen: set[str] = set()  # jobs where such an old life serves on
    overlaps: dict[str, list[str]] = {}
    for ep in endpoints:
        holder = next((a for a in live if _holds(lay, a, ep)), None)
        if holder is not None and (why := _short(holder, ep)):
            if (holder.index, ep.mode, ep.index) in serving:
                placement[(ep.mode, ep.index)] = holder  # its old life serves until it moves
                frozen.add(holder.job_id)
            else:
                unplaceable[ep.name] = f"{why}: it waits for a successor sized for it (a hand-over)"
            resize.setdefault(holder.index, f"{ep.name} {why}")
            resizing.add(ep.name)
            used_by[holder.job_id] = True
        elif holder is not None:
            placement[(ep.mode, ep.index)] = holder
            used_by[holder.job_id] = True
        elif over := [a.job_id for a in live if any(o in covered_by(a) for o in ep.nodes)]:
            overlaps[ep.name] = over
        else:
            uncovered.append(ep)
    # a job where a frozen old life serves: its other workers wait for the successor too (they move
    # there anyway), or one rolled or relaunched in place would take GPUs the frozen life holds
    resizing |= {ep.name for ep in endpoints if (a := placement.get((ep.mode, ep.index))) is not None
                 and a.job_id in frozen}
    for name, over in overlaps.items():  # straddles a job submitted for another layout
        kept = [j for j in over if used_by[j]]
        unplaceable[name] = (f"its node ordinals overlap job {', '.join(kept)}, submitted for another layout and "
                             "holding other workers: delete and re-create the recipe to re-pack it" if kept else
                             f"its node ordinals overlap job {', '.join(over)}, submitted for another layout: it "
                             "waits for that job to be released (no wanted worker is left in it)")
    # new allocations for uncovered ordinals, cut at worker boundaries (and around each extra worker)
    gpus_on = lay.gpus_on
    surge = 2 if recipe.reconcile.rollout.surge_gpus else 1  # room for each worker's surge life (mirror GPUs)
    new_specs = _new_allocations(recipe, lay, _groups(lay, uncovered, recipe.reconcile.nodes_per_allocation),
                                 {a.index for a in live}, surge, placement)
    keep = [a.job_id for a in live if used_by[a.job_id]]
    kept_specs = [
        _spec(recipe, a.index, a.start, a.count,
              min(gpn, surge * max((gpus_on.get(o, 0) for o in range(a.start, a.start + a.count)), default=0)),
              lay.packed)
        for a in live if used_by[a.job_id]
    ]
    return kept_specs + new_specs, keep, placement, unplaceable, resize, frozenset(resizing)


def _groups(lay: NodeLayout, uncovered: list[Endpoint], chunk: int | None) -> list[list[Endpoint]]:
    """The uncovered workers in runs of contiguous ordinals, each at most ``chunk`` nodes (an extra
    worker's elastic ordinals always alone)."""
    groups: list[list[Endpoint]] = []
    for ep in sorted(uncovered, key=lambda e: (e.nodes[0], e.mode, e.index)):
        if groups and not lay.elastic(ep.nodes[0]):
            g = groups[-1]
            g_start, g_end = min(e.nodes[0] for e in g), max(e.nodes[-1] for e in g)
            contiguous = ep.nodes[0] <= g_end + 1
            fits = chunk is None or max(g_end, ep.nodes[-1]) - g_start + 1 <= chunk
            if contiguous and fits:
                g.append(ep)
                continue
        groups.append([ep])
    return groups


def _new_allocations(recipe: Recipe, lay: NodeLayout, groups: list[list[Endpoint]], taken: set[int], surge: int,
                     placement: dict[tuple[str, int], Alloc]) -> list[AllocSpec]:
    """One allocation per group at the lowest free index; its workers placed on it (not submitted
    yet: never running)."""
    gpn = recipe.resources.gpus_per_node
    next_index = 0
    new_specs: list[AllocSpec] = []
    for g in groups:
        while next_index in taken:
            next_index += 1
        start = min(e.nodes[0] for e in g)
        count = max(e.nodes[-1] for e in g) - start + 1
        gpus = max(lay.gpus_on.get(o, 0) for o in range(start, start + count))
        new_specs.append(_spec(recipe, next_index, start, count, min(gpus * surge, gpn), lay.packed,
                               tuple(e.name for e in g)))
        wanted = Alloc("", recipe.name, next_index, start, count, "WANTED")
        for e in g:
            placement[(e.mode, e.index)] = wanted
        taken.add(next_index)
    return new_specs


def covered_by(a: Alloc) -> range:
    return range(a.start, a.start + a.count)


def _holds(lay: NodeLayout, a: Alloc, ep: Endpoint) -> bool:
    """``a`` covers the worker's ordinals; a job of an extra worker holds exactly its own span (one
    submitted for another layout, e.g. before a ``max`` was changed, is released, never shared)."""
    if not a.covers(ep.nodes):
        return False
    # only a job that starts among the extra workers' ordinals must match: a file's job never reaches
    # them (EXTRA_BASE), and one that did would be kept by its file workers, never released
    if lay.elastic(a.start):
        return (a.start, a.count) == (ep.nodes[0], len(ep.nodes))
    return True


def _undersized(lay: NodeLayout, a: Alloc) -> bool:
    return a.gpus is not None and a.gpus < max((lay.gpus_on.get(o, 0) for o in covered_by(a)), default=0)


def _short(a: Alloc, ep: Endpoint) -> str:
    """Why ``a`` cannot hold ``ep``: its label says it holds fewer GPUs per node than the worker uses."""
    need = max(ep.gpus) + 1 if ep.gpus else 0
    if a.gpus is None or a.gpus >= need:
        return ""
    used = f"GPU {ep.gpus[0]}" if len(ep.gpus) == 1 else f"GPUs {ep.gpus[0]}-{ep.gpus[-1]}"
    return f"uses {used}, job {a.job_id} holds {a.gpus} per node"


def _spec(recipe: Recipe, index: int, start: int, count: int, gpus: int,
          packed: tuple[tuple[str, int], ...] = (), workers: tuple[str, ...] = ()) -> AllocSpec:
    return AllocSpec(
        recipe=recipe.name, index=index, start=start, count=count, gpus_per_node=gpus,
        partition=recipe.slurm.partition, account=recipe.slurm.account, time_limit=recipe.slurm.time_limit,
        time_min=recipe.slurm.time_min, reservation=recipe.slurm.reservation,
        directives=tuple(sorted(recipe.sbatch_directives.items())), packed=packed, workers=workers,
    )
