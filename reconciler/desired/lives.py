"""Each worker's life for this tick: its slot, its GPUs in that slot, and the old life a surge replaces.

The pure rules are in ``core/slots.py``; this module applies them while building the
units (``units.worker_units``), which hands out ports from the tick's assignment.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace

from reconciler.backends import failover
from reconciler.core.slots import choose_slots, in_slot, layout_gpus, surge_flips
from reconciler.core.ports import NodePortAllocator
from reconciler.desired.preambles import with_cluster_preamble
from reconciler.recipe.model import Recipe
from reconciler.recipe.topology import Endpoint
from reconciler.desired.units import worker_units
from reconciler.world import Unit, life_name
from reconciler.world import Step
from reconciler.backends.registry import backend_for, endpoints_of


def worker_lives(recipe: Recipe, placed: list[Endpoint], hostnames: dict[int, str], ports: NodePortAllocator,
                  runtime, disc_env, wiring, steps: list[Step], job_of: dict, held_gpus: Mapping,
                  needs: Mapping | None = None) -> tuple:
    """The workers' units, each in the life slot ``core.slots`` picks; for those whose new life
    surges into the other slot, the old life (the unit in its old slot: ports, URL) as ``previous``;
    and the names of those that would surge but whose allocation has no GPUs for it (``no_room``)."""
    if not placed:
        return [], {}, frozenset()
    layout = layout_gpus(endpoints_of(recipe))

    def gpu_engine(ep: Endpoint) -> bool:
        return backend_for(recipe, ep.mode).needs_gpus()

    steps = [s for s in steps if recipe.roles.get(s.role) is not None]
    owners = ports.owners() if any((ep.mode, ep.index) not in {(s.role, s.index) for s in steps} for ep in placed) \
        else set()
    held = {(ep.mode, ep.index): (f"{recipe.name}/{ep.name}" in owners, f"{recipe.name}/{ep.name}@b" in owners)
            for ep in placed}
    slot = choose_slots([(ep.mode, ep.index) for ep in placed], steps, job_of, held)
    def life(ep: Endpoint, s: int) -> Endpoint:
        return in_slot(ep, s, gpu_engine(ep), layout, held_gpus.get((ep.mode, ep.index), 0))

    lives = [life(ep, slot[(ep.mode, ep.index)]) for ep in placed]
    units = _units(recipe, lives, hostnames, ports, runtime, disc_env, wiring, job_of, needs)
    # a failover worker's engines share one gms and directory: they are replaced in place, never surged
    surge = 0 if failover.engines_per_worker(recipe) > 1 else recipe.reconcile.rollout.max_surge
    flips = surge_flips(units, steps, job_of, surge)
    by_key = {(ep.mode, ep.index): ep for ep in placed}
    # two lives of a worker on one allocation must not share a GPU
    no_room = {k for k in flips if set(life(by_key[k], slot[k]).gpus) & set(life(by_key[k], 1 - slot[k]).gpus)
               and gpu_engine(by_key[k])}
    flips -= no_room
    if flips:
        slot |= {k: 1 - slot[k] for k in flips}
        lives = [life(ep, slot[(ep.mode, ep.index)]) for ep in placed]
        units = _units(recipe, lives, hostnames, ports, runtime, disc_env, wiring, job_of, needs)
    # an old life still beside the current one on its allocation (a surge under way): the unit in
    # that other slot — its ports and URL — so that it is probed and routed until it leaves
    beside = {(s.role, s.index) for s in steps if surge and (s.role, s.index) in slot
              and s.job_id == job_of.get((s.role, s.index)) and s.slot != slot[(s.role, s.index)]}
    previous: dict[tuple[str, int], Unit] = {}
    if beside:
        other = _units(recipe, [life(ep, 1 - slot[(ep.mode, ep.index)]) if (ep.mode, ep.index) in beside else live
                                for ep, live in zip(placed, lives)], hostnames, ports, runtime, disc_env, wiring,
                       job_of, needs)
        previous = {(u.role, u.index): u for u in other if (u.role, u.index) in beside}
    previous |= moving_from(recipe.name, units, steps, job_of, ports, surge)
    return units, previous, frozenset(f"{r}_{i}" for r, i in no_room)


def _units(recipe: Recipe, lives: list[Endpoint], *args) -> list[Unit]:
    """The units as they run: the cluster's bash preamble is part of their spec (and hash)."""
    return [with_cluster_preamble(u, recipe) for u in worker_units(recipe, lives, *args)]


def moving_from(recipe: str, units: list[Unit], steps: list[Step], job_of: Mapping, ports: NodePortAllocator,
                max_surge: int) -> dict[tuple[str, int], Unit]:
    """Old lives on another allocation (a hand-over) of workers whose new life is on theirs: each
    as its unit with the old life's node, slot and ports, to be probed and routed until the new
    one takes over. Ports come from the registry (the old slot's owner), the node from the step."""
    if max_surge <= 0:
        return {}
    out: dict[tuple[str, int], Unit] = {}
    for u in units:
        key = (u.role, u.index)
        away = [s for s in steps if (s.role, s.index) == key and s.job_id != job_of.get(key) and s.slot != u.slot
                and s.rank == 0 and s.nodes]
        if not away:
            continue
        s = max(away, key=lambda s: s.step_id)
        held = ports.held_by(f"{recipe}/{life_name(u.name, s.slot)}").get(s.nodes[0], {})
        probe_port = next((n for n, p in u.ports.items() if p == u.health_port), None)
        if probe_port is None or probe_port not in held:
            continue  # nothing known to probe: the old life is treated as not serving
        out[key] = replace(u, slot=s.slot, nodes=(s.nodes[0], *u.nodes[1:]), ports=held, health_port=held[probe_port])
    return out


def frontend_life(build: Callable[[int], Unit | None], steps: list[Step], job_of: Mapping, max_surge: int,
                  ports: NodePortAllocator | None = None) -> tuple[Unit | None, Unit | None]:
    """The frontend in its life slot, and its old life when a new one starts beside it (only a
    frontend whose lives share the port: its address stays). ``build(slot)`` makes the unit."""
    fe = build(0)
    if fe is None or not fe.shares_port:
        return fe, None
    key = (fe.role, 0)
    mine = [s for s in steps if (s.role, s.index) == key]
    slot = choose_slots([key], mine, job_of, {key: (True, False)})[key]
    fe = build(slot) if slot else fe
    if fe is None or max_surge <= 0:
        return fe, None
    if surge_flips([fe], mine, job_of, max_surge):
        return build(1 - slot), fe
    away = [s for s in mine if s.job_id != job_of.get(key) and s.slot != slot and s.nodes]
    if not away:
        return fe, None
    old = build(1 - slot)  # moving to a successor allocation: the old life, where its step runs
    node = max(away, key=lambda s: s.step_id).nodes[0]
    if old is None or node == old.nodes[0]:
        return fe, old
    # its port there (a recipe's fixed frontend.port is the same everywhere); the probe asks for this
    # life by name, so a guess that reaches another process is not mistaken for it
    port = (ports.lookup(node, old.port_owner, "http") if ports is not None else None) or old.health_port
    return fe, replace(old, nodes=(node,), ports={**old.ports, "http": port}, health_port=port)
