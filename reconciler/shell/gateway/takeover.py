"""A renamed deployment's gateway takes the old name's address (core/plan/rename.py): the port
moves from one name to the other in the registry, and both masters listen on it for a moment
(SO_REUSEPORT)."""

from __future__ import annotations

from reconciler.core.plan.rename import address_takeable
from reconciler.core.ports import NodePortAllocator
from reconciler.shell.gateway.record import OWNER_NAME, Records


def take(gw: Records, recipe: str, rec: dict, take_from: str, ports: NodePortAllocator, now: float,
         host: str, aliases: set[str]) -> tuple[str, int] | None:
    """The old name's address for ``recipe``'s first one, when it can be taken (the same test as
    the rename's step); None: it cannot (the rename goes on without it)."""
    old = gw._record(take_from)
    if not address_takeable(old, host):
        return None
    port = old["port"]
    owner = f"{recipe}/{OWNER_NAME}"
    for node in {host, *aliases}:  # the port is the new name's from now on
        ports.release_key(node, f"{take_from}/{OWNER_NAME}", "http")
        ports.claim(node, owner, "http", port)
    # both masters listen on it (SO_REUSEPORT) until the old one is stopped
    gw._write(recipe, {**rec, "host": host, "port": port, "allocatedAt": now, "takenFrom": take_from,
                       "reuseport": True})
    return host, port
