"""Find a gateway's nginx master again after its state was removed under it.

An operator or a cleanup script may remove ``state/<recipe>/gateway/`` (config, pid file, logs)
or ``gateway.json`` (the port) while the master keeps serving: nginx is a daemon and does not
care. Without its state the reconciler used to take a new port and start a second master beside
the one clients use: the endpoint moved and the old master was left with no owner. Here the
master is looked for by the processes themselves (``-p <prefix>/`` in the command line, our
uid, answering ``/gateway/health`` as this gateway), and ``core/plan/gateway_found.py`` decides
which to adopt; its port stays the endpoint and its pid file and record are written again (the
config is rewritten by the reload the caller then makes).

Looked for only when something is missing (no port recorded, no config: a new gateway too) or
the recorded port is held while no master is known; /proc is scanned once per pass whatever the
number of gateways looked for (a thousand new ones in one pass: tick.py).
"""

from __future__ import annotations

import os
import socket
import sys
import time
from pathlib import Path
from typing import Protocol

import structlog

from reconciler.core.plan.gateway_found import Master, found, port_of
from reconciler.core.ports import NodePortAllocator
from reconciler.fsutil import atomic_write_text
from reconciler.gateway.procs import children_of
from reconciler.drivers.state import StateDir
from reconciler.shell.gateway.record import OWNER_NAME, Change, health_page, ours
from reconciler.shell.gateway.sweep import end_master, listening, masters_under

log = structlog.get_logger("reconciler")
HEALTH_TIMEOUT_S = 2.0  # a loaded host: a master that serves answers its own static page well within
HEALTH_TRIES = 2  # a master is ended only if it fails twice: a false "not ours" cuts what it carries


class Gateways(Protocol):
    """What of host.py's Gateways this uses (not imported: host.py imports this)."""

    state: StateDir
    host: str
    aliases: set[str]

    def _record(self, recipe: str) -> dict: ...
    def _write(self, recipe: str, rec: dict) -> None: ...
    def nginx_masters(self, now: float) -> dict[int, str]: ...


def lost(rec: dict, conf: Path) -> bool:
    """Some of the gateway's state is gone: no port recorded (gateway.json removed) or no config
    (gateway/ removed). A gateway never started has neither, and is looked for once (cheap: none)."""
    return not isinstance(rec.get("port"), int) or not conf.exists()


def again(g: Gateways, recipe: str, prefix: Path, ports: NodePortAllocator, now: float) -> tuple[bool, list[Change]]:
    """Look for the gateway's running master and adopt it (record, pid file, the port registry):
    (adopted, what is said). Masters that cannot be adopted, or are extra, are ended gracefully
    (SIGQUIT: what they carry finishes) and said at warning; the endpoint's port is kept for the
    master started next."""
    rec = g._record(recipe)
    recorded = rec.get("port") if isinstance(rec.get("port"), int) else None
    masters = look(g.state.root, recipe, prefix, g.nginx_masters(now))
    f = found(recorded, masters)
    changes: list[Change] = []
    if f.end:
        by_pid = {m.pid: m for m in masters}
        for pid in f.end:  # before the adopted one's record: a duplicate may hold another port
            end_master(pid, port_of(by_pid[pid]) or f.port or 0)
        log.warning("gateway master not adopted", recipe=recipe, why=f.why)
        changes.append(Change("GatewayReplaced", recipe, str(f.why)))
    if f.keep is None:
        if f.port is not None and recorded is None:  # the endpoint's port, for the master started next
            g._write(recipe, {**rec, "host": rec.get("host") or g.host, "port": f.port, "allocatedAt": now})
        return False, changes
    pid, port = f.keep.pid, f.port
    assert port is not None  # an adopted master serves one port (gateway_found.port_of)
    missing = [n for n, gone in (("gateway.json's port", recorded is None),
                                 ("nginx.pid", not (prefix / "nginx.pid").exists()),
                                 ("nginx.conf", not (prefix / "nginx.conf").exists())) if gone]
    atomic_write_text(prefix / "nginx.pid", f"{pid}\n")  # what master_pid and an operator's kill -HUP read
    host = rec.get("host") or g.host
    for node in {host, *g.aliases}:  # no unit is given the port it serves (a registry rebuilt, too)
        ports.claim(node, f"{recipe}/{OWNER_NAME}", "http", port)
    g._write(recipe, {**rec, "host": host, "port": port, "allocatedAt": rec.get("allocatedAt") or now,
                      "listen": f.listen, "pid": pid, "startedAt": rec.get("startedAt") or now,
                      "exitedAt": None, "notBefore": None, "lastError": None,
                      "workers": sorted(children_of(pid))})
    said = (f"nginx master {pid} still serves {host}:{port} with its state removed "
            f"({', '.join(missing) or 'its pid'}): adopted, the endpoint kept; its state is written again")
    log.warning("gateway found again", recipe=recipe, pid=pid, port=port, missing=missing)
    return True, changes + [Change("GatewayFound", recipe, said)]


def look(root: Path, recipe: str, prefix: Path, among: dict[int, str] | None = None) -> list[Master]:
    """The nginx masters running with this gateway's prefix as this user, with what they listen on
    and whether they answer as this gateway (another user's process is never a candidate).
    ``among``: this pass's scan of the host's masters (sweep.nginx_masters)."""
    out = []
    for pid in masters_under(prefix, among):
        try:
            if os.stat(f"/proc/{pid}").st_uid != os.getuid():
                continue
            # starttime, field 22 of /proc/<pid>/stat (the 20th after the command name)
            started = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
        listens = sockets_of(pid)
        port = port_of(Master(pid, started, listens, False))  # the one port it may be asked on
        out.append(Master(pid, started, listens, port is not None and _answers(port, root, recipe)))
    return out


def _answers(port: int, root: Path, recipe: str) -> bool:
    """Its /gateway/health (loopback: the config always listens there) names this gateway."""
    for attempt in range(HEALTH_TRIES):
        if ours(health_page("127.0.0.1", port, HEALTH_TIMEOUT_S), root, recipe):
            return True
        if attempt + 1 < HEALTH_TRIES:
            time.sleep(0.2)
    return False


def sockets_of(pid: int) -> tuple[tuple[str, int], ...]:
    """(address, port) of each TCP socket ``pid`` holds in LISTEN, from /proc (no ss, no root)."""
    try:
        inodes = {os.readlink(fd) for fd in Path(f"/proc/{pid}/fd").iterdir()}
    except OSError:
        return ()
    return tuple(sorted({(_address(addr, socket.AF_INET6 if table.endswith("6") else socket.AF_INET), port)
                         for table, addr, port, inode in listening() if inode in inodes}))


def _address(hexed: str, family: int) -> str:
    """/proc/net/tcp{,6}'s address: 32-bit words printed in host byte order."""
    raw = bytes.fromhex(hexed)
    if sys.byteorder == "little":
        raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    return socket.inet_ntop(family, raw)
