"""One read of the world: manifests, desired state, observed state and the plan. Writes nothing."""

from __future__ import annotations

from dataclasses import dataclass

from reconciler.core.plan import Plan
from reconciler.core.portplan import Reassigned
from reconciler.core.ports import NodePortAllocator
from reconciler.shell.manifests import Manifests
from reconciler.world import Desired, InFlight, Observed


@dataclass(frozen=True)
class Snapshot:
    manifests: Manifests
    desired: Desired
    observed: Observed
    plan: Plan
    ports: NodePortAllocator  # the port assignment this plan uses (persisted only by a tick)
    reassigned: tuple[Reassigned, ...] = ()  # workers moved off ports a foreign process holds
    failed_launches: tuple[InFlight, ...] = ()
    now: float = 0.0
    # "<recipe>/<unit>" whose last life ended on a port another process holds (not the node's fault)
    bind_failed: frozenset[str] = frozenset()
