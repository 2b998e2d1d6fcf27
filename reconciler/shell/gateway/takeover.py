"""A renamed deployment's gateway takes the old name's address (core/plan/rename.py): the port
moves from one name to the other in the registry, both masters listen on it for a moment
(SO_REUSEPORT), and once the rename is over the new one's record says no more of either.

SO_REUSEPORT lets any process of this user bind the port beside the gateway and take a share of its
connections: it is asked for only while a rename needs two masters on the port. A reload cannot
take the option off a socket nginx already listens on (the kernel keeps it; nginx only ever adds
it), so the socket keeps it until that master is next started (docs/operations.md, "Security")."""

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


def shared(gw: Records, recipe: str, rec: dict, share: bool) -> dict:
    """``share``: a rename needs a second master on this gateway's port (it is the old name's, or
    the new one's while the old one's master may still listen). Set while so; once not, the record
    and the config drop it (and the rename's trace, ``takenFrom``): the next start binds without."""
    if share and not rec.get("reuseport"):
        rec = {**rec, "reuseport": True}  # a reload sets it on the bound socket
    elif not share and (rec.get("reuseport") or rec.get("takenFrom")) and rec.get("startedAt") is not None:
        rec = {k: v for k, v in rec.items() if k not in ("reuseport", "takenFrom")}
    else:
        return rec
    gw._write(recipe, rec)
    return rec


def keep_shared(gw: Records, recipe: str, rec: dict, ports: NodePortAllocator, aliases: set[str]) -> None:
    """``recipe``'s gateway stopped and its port released: a gateway of another name that holds
    the same address (the renamed one, which took it; or the old one, whose new name gave up mid
    hand-over) keeps it in the registry, never handed to anything else while it listens there."""
    port, host = rec.get("port"), rec.get("host")
    if not isinstance(port, int):
        return
    for other in gw.known():
        o = gw._record(other) if other != recipe else {}
        if o.get("port") == port and o.get("host") == host:
            for node in {host, *aliases} if host else aliases:
                ports.claim(node, f"{other}/{OWNER_NAME}", "http", port)
