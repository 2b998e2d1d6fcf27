"""The port assignment of a tick, as a value: what changes before and after desired.build.

``desired.build`` hands out ports from a copy of the registry (``NodePortAllocator.copy``);
these two policies edit that copy, and the shell persists it only when it runs the tick
(``get`` and ``plan`` throw it away).

- reassign_after_bind_failures: a worker whose last life could not bind its port (a
  process we do not own holds it) gets new ports, and the taken ones are handed to
  nobody for an hour — instead of crash-looping on them. Idempotent: once the worker's
  ports differ from those of the failed life, nothing more happens.
- release_unused: ports of owners that are neither desired nor running go back to the pool
  (not while the prune guard holds: those workers still run).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from reconciler.core.ports import NodePortAllocator
from reconciler.world import life_name
from reconciler.world import Desired, Observed

BLOCK_SECONDS = 3600.0


@dataclass(frozen=True)
class Reassigned:
    owner: str  # "<recipe>/<unit>"
    taken: tuple[tuple[str, int], ...]  # (node, port) now blocked

    @property
    def recipe(self) -> str:
        return self.owner.split("/", 1)[0]

    @property
    def unit(self) -> str:
        return self.owner.split("/", 1)[1]


def reassign_after_bind_failures(
    ports: NodePortAllocator, failed: Mapping[str, Mapping[str, Mapping[str, int]]], now: float
) -> tuple[Reassigned, ...]:
    """``failed``: owner -> the ports (node -> name -> port) of its last life, which ended on a bind failure."""
    out = []
    for owner in sorted(failed):
        held = ports.held_by(owner)
        used = failed[owner]
        if not used or any(held.get(node, {}).get(name) != port
                           for node, names in used.items() for name, port in names.items()):
            continue  # already moved to other ports (or released): nothing to do
        taken = tuple(sorted((node, port) for node, names in held.items() for port in names.values()))
        for node, port in taken:
            ports.block(node, port, now + BLOCK_SECONDS)
        ports.release(owner)
        out.append(Reassigned(owner, taken))
    return tuple(out)


def release_unused(ports: NodePortAllocator, desired: Desired, observed: Observed, refused_prune: bool) -> tuple[str, ...]:
    if refused_prune:
        return ()
    live = {u.port_owner for d in desired.recipes.values() for u in (*d.all_units, *d.previous.values())}
    live |= {f"{d.name}/{life_name(f'{role}_{i}', slot)}" for d in desired.recipes.values() for (role, i) in d.waiting
             for slot in (0, 1)}
    live |= {f"{s.recipe}/{s.life}" for s in observed.steps}
    live |= {f"{n}/gateway" for n in desired.recipes}  # allocated once, kept for the deployment's life
    live |= {o for o in ports.owners() if o.split("/", 1)[0] in desired.held}  # held: what it runs keeps its ports
    gone = tuple(sorted(ports.owners() - live))
    for owner in gone:
        ports.release(owner)
    return gone
