"""Which running nginx master a deployment's gateway is when its state no longer says (pure).

The gateway's state — ``gateway.json`` (its port, its master's pid), nginx's pid file and config
under ``gateway/`` — may be removed while the master keeps serving (an operator, a cleanup
script). The endpoint is promised stable, so the reconciler must not take a new port and start a
second master beside the one clients use. The shell (shell/gateway/refind.py) lists the masters
running with this gateway's prefix in their command line, as the reconciler's user, with what each
listens on; this decides which one is the gateway (kept, its port the endpoint's) and which are
ended (a duplicate, or one that cannot be adopted safely).
"""

from __future__ import annotations

from dataclasses import dataclass

ANY, ANY6, LOOPBACK = "0.0.0.0", "[::]", "127.0.0.1"  # as reconciler.gateway renders them


@dataclass(frozen=True)
class Master:
    """An nginx master found running with the gateway's prefix."""

    pid: int
    started: int  # start time (clock ticks since boot): of two candidates, the older stays
    listens: tuple[tuple[str, int], ...]  # (address, port) of each socket it listens on
    answers: bool  # its /gateway/health names this gateway: it is ours and it serves


@dataclass(frozen=True)
class Found:
    keep: Master | None  # adopted: the gateway's master from now on
    port: int | None  # the endpoint's port (recorded, else the one the found master serves)
    listen: str | None  # the address it binds (reconcile.gateway.listen), read off its sockets
    end: tuple[int, ...]  # masters to end (gracefully): duplicates, or none adoptable
    why: str | None  # said at warning (an event) when a master is ended rather than adopted


def port_of(m: Master) -> int | None:
    """The one port a gateway master listens on; None for none or several (not a gateway's shape:
    its config listens on one port, on 127.0.0.1 too when bound to one address)."""
    ports = {p for _, p in m.listens}
    return next(iter(ports)) if len(ports) == 1 else None


def listen_of(m: Master) -> str:
    """``reconcile.gateway.listen`` as the sockets show it: the wildcard, else the one address
    beside the loopback the config always adds (the reconciler's probe comes from 127.0.0.1)."""
    addrs = {a for a, _ in m.listens}
    if ANY in addrs:
        return ANY
    if "::" in addrs:
        return ANY6
    other = sorted(addrs - {LOOPBACK})
    return other[0] if other else LOOPBACK


def found(recorded_port: int | None, masters: list[Master]) -> Found:
    """The gateway among ``masters``: one that answers as this gateway on one port — the recorded
    one when a record says it — is adopted (the oldest if several do); every other that listens is
    ended. When none can be adopted, all are ended and the endpoint's port is kept for the one
    started next: the recorded port, else the only port they served."""
    # one that listens on nothing was told to quit (a stop, a listen change) and only finishes what it
    # carries: neither the gateway nor in the way; ending it again would say a replacement that is not one
    masters = [m for m in masters if m.listens]
    if not masters:
        return Found(None, recorded_port, None, (), None)
    fit = [m for m in masters if m.answers and port_of(m) is not None
           and (recorded_port is None or port_of(m) == recorded_port)]
    keep = min(fit, key=lambda m: (m.started, m.pid), default=None)
    end = tuple(sorted(m.pid for m in masters if m is not keep))
    if keep is not None:
        port = port_of(keep)
        why = (f"nginx master(s) {', '.join(map(str, end))} also ran with this gateway's prefix: ended "
               f"(master {keep.pid} on port {port} kept)") if end else None
        return Found(keep, port, listen_of(keep), end, why)
    served = {p for m in masters if (p := port_of(m)) is not None}
    port = recorded_port if recorded_port is not None else (next(iter(served)) if len(served) == 1 else None)
    reasons = "; ".join(_unfit(m, recorded_port) for m in masters)
    then = (f"a new master is started on port {port}, the endpoint's" if port is not None
            else "no port to keep: a new one is taken")
    return Found(None, port, None, end, f"cannot adopt the running nginx master(s) ({reasons}): ended; {then}")


def _unfit(m: Master, recorded_port: int | None) -> str:
    """Why one master is not adopted, in words."""
    p = port_of(m)
    if p is None:
        return f"{m.pid} listens on {len({q for _, q in m.listens})} ports, not one"
    if recorded_port is not None and p != recorded_port:
        return f"{m.pid} serves port {p}, the record says {recorded_port}"
    return f"{m.pid} does not answer /gateway/health as this gateway"
