"""Stage 3 of the desired state: what every unit source reads, computed once per recipe and tick.

The runtime (model path, served name, interpreters), the job's container, the discovery
environment (etcd/NATS addresses: their ports are handed out here, first) and whether every
address the workers are given is known yet. ``ports`` is the tick's port assignment: the one
mutable thing the pipeline carries; sources hand ports out of it as they build units, and the
same owner on the same node always gets the same port back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from reconciler.backends.base import Runtime
from reconciler.backends.registry import Engines
from reconciler.core.ports import NodePortAllocator
from reconciler.desired.placement import Placement
from reconciler.core.slots import choose_slots
from reconciler.desired.services.units import ADDRESSED_KINDS, MOVING_KINDS, discovery_env, host_of
from reconciler.desired.topology import Topology
from reconciler.desired.runtime import _container, container_srun_options, runtime_for
from reconciler.recipe.model import Recipe
from reconciler.world import Step


@dataclass(frozen=True)
class Context:
    top: Topology
    where: Placement
    ports: NodePortAllocator
    state_dir: Path
    runtime: Runtime
    steps: tuple[Step, ...]  # the recipe's observed steps: they tell each unit's life slot
    discovery_env: Mapping[str, str]  # what Dynamo components (and inheriting services) get
    service_slots: Mapping[str, int]  # a moving service's role -> the slot of its current life
    container: str | None  # the job's container image (None: the workers run on the hosts)
    addresses_known: bool  # every etcd/NATS/Mooncake address the workers get is known
    container_srun: Mapping[str, str]  # a container step's own srun flags and mounts (passes.wrap)

    @property
    def recipe(self) -> Recipe:
        return self.top.recipe

    @property
    def backends(self) -> Engines:
        """The recipe's backends, bound once by the topology stage."""
        return self.top.backends

    @property
    def dedicated_host(self) -> str | None:
        return self.where.hosts.get(self.top.dedicated) if self.top.dedicated is not None else None

    @property
    def workers(self) -> tuple:
        """The workers to build this tick: the placed ones, once the addresses they are given are
        known (until then what runs is left alone rather than rolled to a spec without them)."""
        return self.where.placed if self.addresses_known else ()


def context(top: Topology, where: Placement, ports: NodePortAllocator, state_dir: Path, python: str,
            steps: list[Step]) -> Context:
    recipe = top.recipe
    ded = where.hosts.get(top.dedicated) if top.dedicated is not None else None
    slots = service_slots(top, where, steps, ports)
    env = discovery_env(recipe, list(top.services), top.facts.discovery, where.head, ports, state_dir, ded, slots)
    known = not any(s.kind in ADDRESSED_KINDS and not s.external and host_of(s, where.head, ded) is None
                    for s in top.services)
    backend = top.backends.serving
    runtime = runtime_for(recipe, state_dir, python, backend)
    return Context(top, where, ports, Path(state_dir), runtime, tuple(steps), env, slots, _container(recipe, backend),
                   known, container_srun_options(recipe, runtime.config_dir, backend))


def service_slots(top: Topology, where: Placement, steps: list[Step], ports: NodePortAllocator) -> dict[str, int]:
    """The life slot of each moving service's (one-instance) current life, read back from its steps
    as every slotted unit's is (``core.slots.choose_slots``): the slot of its newest step on its
    allocation, else — its steps all on another allocation, a hand-over — the other slot. Known
    here, before any unit is built, because the units that read its address are given this one;
    the life-slot pass (``passes.live``) reads the same steps and ports, so it agrees."""
    moving = [s for s in top.services if s.kind in MOVING_KINDS and not s.external and not s.per_worker]
    if not moving:
        return {}
    job = lambda s: where.jobs.get(top.dedicated if s.placement == "dedicated" else 0, where.head_job or "")  # noqa: E731
    keys = [(s.role, 0) for s in moving]
    stepped = {(st.role, st.index) for st in steps}
    owners = ports.owners(top.recipe.name) if any(k not in stepped for k in keys) else set()
    name = top.recipe.name
    held = {k: (f"{name}/{k[0]}_0" in owners, f"{name}/{k[0]}_0@b" in owners) for k in keys}
    chosen = choose_slots(keys, steps, {(s.role, 0): job(s) for s in moving}, held)
    return {s.role: chosen.get((s.role, 0), 0) for s in moving}
