"""Stage 5 of the desired state: the passes every unit goes through alike, whatever its source.

* ``finish``: a container step's own srun flags and mounts (``wrap``: the model at /model, the
  config directory, the recipe's mounts; a recipe's own ``container-mounts`` add to them), the
  cluster's ``default_bash_preamble`` before each of its launches (srtctl), then the spec hash
  over what the unit runs. A unit's hash is final only here, and
  its life slot is chosen by comparing hashes, so ``live`` finishes every unit it builds.
* ``live``: life slots. Each unit in its slot (``core.slots.choose_slots``: read back from the
  steps, never remembered); a unit whose steps on its allocation all run an older spec surges
  into the other slot (``surge_flips``), unless its two lives would share a GPU there
  (``no_room``: rolled in place, or moved to a surge allocation); and the old life beside a
  surge, or on the allocation it is moving from (a hand-over), as ``previous`` so that it is
  probed and routed until the new one takes over.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from reconciler.core.ports import NodePortAllocator
from reconciler.core.slots import choose_slots, surge_flips
from reconciler.desired.preambles import with_cluster_preamble
from reconciler.desired.sources.base import Key, Life
from reconciler.recipe.model import Recipe
from reconciler.desired.spec_hash import spec_hash
from reconciler.frozen import evolve
from reconciler.world import Step, Unit, life_name


def finish(unit: Unit | None, recipe: Recipe, container_srun: Mapping[str, str]) -> Unit | None:
    """``container_srun``: the recipe's container flags (``runtime.container_srun_options``), computed
    once per build by the context stage."""
    if unit is None:
        return None
    unit = with_cluster_preamble(wrap(unit, container_srun), recipe)
    return evolve(unit, spec_hash=spec_hash(unit.launches, unit.container, unit.files, unit.srun_options))


def wrap(unit: Unit, own: Mapping[str, str]) -> Unit:
    """A container step with srtctl's container flags (``own``) under its own srun options."""
    if not unit.container:
        return unit
    merged = {**own, **dict(unit.srun_options)}
    if merged["container-mounts"] != own["container-mounts"]:
        # a recipe's own mounts add to the model and config mounts the argv relies on
        merged["container-mounts"] = own["container-mounts"] + "," + merged["container-mounts"]
    return evolve(unit, srun_options=tuple(sorted(merged.items())))


@dataclass(frozen=True)
class Lived:
    units: tuple[Unit, ...]  # in their life slots, in the lives' order
    previous: Mapping[Key, Unit] = field(default_factory=dict)  # the old life a surge or a move replaces
    no_room: frozenset[str] = frozenset()  # would surge, but its two lives would share a GPU


def live(lives: tuple[Life, ...], recipe: Recipe, steps: tuple[Step, ...], job_of: Mapping[Key, str],
         ports: NodePortAllocator, max_surge: int, container_srun: Mapping[str, str]) -> Lived:
    if not lives:
        return Lived(())
    by_key = {life.key: life for life in lives}
    mine = [s for s in steps if (s.role, s.index) in by_key]
    slot = _slots(lives, recipe.name, mine, job_of, ports)

    def build(key: Key, s: int) -> Unit | None:
        return finish(by_key[key].build(s), recipe, container_srun)

    units = {life.key: build(life.key, slot[life.key]) for life in lives}
    surging = [u for life in lives if life.surges and (u := units[life.key]) is not None]
    flips = surge_flips(surging, mine, job_of, max_surge)
    # two lives of a unit on one allocation must not share a GPU
    no_room = {k for k in flips if by_key[k].exclusive_gpus
               and set(by_key[k].gpus(slot[k])) & set(by_key[k].gpus(1 - slot[k]))}
    for k in [life.key for life in lives if life.key in flips - no_room]:
        slot[k] = 1 - slot[k]
        units[k] = build(k, slot[k])
    previous = _beside(lives, units, slot, mine, job_of, build, max_surge)
    previous |= _moving(lives, units, mine, job_of, build, ports, max_surge)
    return Lived(tuple(u for life in lives if (u := units[life.key]) is not None), previous,
                 frozenset(f"{r}_{i}" for r, i in no_room))


def _slots(lives: tuple[Life, ...], recipe: str, steps: list[Step], job_of: Mapping[Key, str],
           ports: NodePortAllocator) -> dict[Key, int]:
    """Each slotted unit's slot; the others live in slot 0."""
    slotted = [life for life in lives if life.slotted]
    stepped = {(s.role, s.index) for s in steps}
    owners = ports.owners(recipe) if any(life.key not in stepped for life in slotted) else set()

    def owner(life: Life, s: int) -> str:
        name = f"{life.key[0]}_{life.key[1]}"
        return f"{recipe}/{name if life.shares_address else life_name(name, s)}"

    # no port held (every unit has steps): no owner name to look up (choose_slots reads held only then)
    held = {life.key: (owner(life, 0) in owners, owner(life, 1) in owners) for life in slotted} if owners else {}
    chosen = choose_slots([life.key for life in slotted], steps, job_of, held)
    return {life.key: chosen.get(life.key, 0) for life in lives}


def _beside(lives, units, slot, steps, job_of, build, max_surge) -> dict[Key, Unit]:
    """An old life still beside the current one on its allocation (a surge under way): the unit in
    that other slot — its ports and URL — so that it is probed and routed until it leaves."""
    if max_surge <= 0:
        return {}
    surging = {life.key for life in lives if life.surges and units[life.key] is not None}
    beside = {(s.role, s.index) for s in steps if (s.role, s.index) in surging
              and s.job_id == job_of.get((s.role, s.index)) and s.slot != slot[(s.role, s.index)]}
    out = {}
    for life in lives:
        if life.key in beside and (old := build(life.key, 1 - slot[life.key])) is not None:
            out[life.key] = old
    return out


def _moving(lives, units, steps, job_of, build, ports: NodePortAllocator, max_surge: int) -> dict[Key, Unit]:
    """Old lives on another allocation (a hand-over) of units whose new life is on theirs: each as
    its unit with the old life's node, slot and ports, to be probed and routed until the new one
    takes over. The node comes from the step, the ports from the registry (the old life's owner
    there); a unit whose lives share one address keeps its address (its port there, else its own)."""
    if max_surge <= 0:
        return {}
    by_key: dict[Key, list[Step]] = {}  # each life's steps, looked up, not scanned for per life
    for s in steps:
        by_key.setdefault((s.role, s.index), []).append(s)
    out: dict[Key, Unit] = {}
    for life in lives:
        u = units[life.key]
        if u is None or not (life.surges or life.moves):
            continue
        away = [s for s in by_key.get(life.key, ()) if s.job_id != job_of.get(life.key)
                and s.slot != u.slot and s.rank == 0 and s.nodes]
        if not away:
            continue
        s = max(away, key=lambda s: s.step_id)
        node = s.nodes[0]
        if life.shares_address:
            old = build(life.key, s.slot)
            if old is None or node == old.nodes[0]:
                if old is not None:
                    out[life.key] = old
                continue
            port = ports.lookup(node, old.port_owner, "http") or old.health_port
            out[life.key] = replace(old, nodes=(node,), ports={**old.ports, "http": port}, health_port=port)
            continue
        held = ports.held_by(f"{u.recipe}/{life_name(u.name, s.slot)}").get(node, {})
        probe = next((n for n, p in u.ports.items() if p == u.health_port), None)
        if probe is None or probe not in held:
            continue  # nothing known to probe: the old life is treated as not serving
        out[life.key] = replace(u, slot=s.slot, nodes=(node, *u.nodes[1:]), ports=held, health_port=held[probe])
    return out
