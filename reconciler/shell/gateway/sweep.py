"""Stop every gateway process (nginx masters, holders) under a state directory that goes for good.

Kept apart from shell/gateway/host.py: it needs nothing of the running gateways'
bookkeeping, only the processes' command lines.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

from reconciler.gateway.procs import quit_nginx_workers
from reconciler.shell.gateway import holder_supervisor
from reconciler.shell.gateway.bindcheck import bind_free


def quit_under(root: Path) -> list[int]:
    """Tell every gateway master whose prefix is under ``root`` to quit (SIGQUIT: graceful), by its
    own pid; the pids told. A gateway is a daemon on this host that outlives the reconciler by design
    (workloads keep running when it stops): whoever removes a state directory for good (a benchmark's
    teardown, a test session) stops its gateways first, or they hold their ports with no record left."""
    told = masters_under(Path(root))
    for pid in told:
        try:
            os.kill(pid, signal.SIGQUIT)
        except OSError:
            continue
    return told + holder_supervisor.quit_holders_under(Path(root)) + _quit_orphans_under(Path(root))


def _quit_orphans_under(root: Path) -> list[int]:
    """The workers of a master killed with SIGKILL outlive it, holding its port with no master to
    tell: those listening on a port a gateway record under ``root`` names are told to quit too."""
    told: list[int] = []
    for rec in sorted(root.rglob("gateway.json")):
        try:
            port = json.loads(rec.read_text()).get("port")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(port, int) and not bind_free(port):
            told += quit_nginx_workers(orphan_nginx_workers(port))
    return told


def masters_under(root: Path, among: dict[int, str] | None = None) -> list[int]:
    """The nginx masters whose prefix (``-p``) is ``root`` or under it, by the processes themselves,
    not the pid files: a state directory wiped under a running reconciler leaves its gateway's
    master running with no pid file to find it by. ``among``: a scan already made (nginx_masters)."""
    where = f"-p {Path(root)}/"  # under root: not a sibling whose name only begins with root's
    return [pid for pid, cmd in (nginx_masters() if among is None else among).items() if where in cmd]


def nginx_masters() -> dict[int, str]:
    """pid -> command line of every nginx master on this host (one /proc scan)."""
    found: dict[int, tuple[int, str]] = {}  # pid -> (parent pid, command line)
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if cmd.startswith("nginx: master process"):
                found[int(proc.name)] = (_ppid(int(proc.name)), cmd)
        except (OSError, ValueError, IndexError):
            continue
    # a worker the master has just forked bears the master's command line until it renames itself:
    # a fork of a found master is not a master (it goes with its master)
    return {pid: cmd for pid, (parent, cmd) in sorted(found.items()) if parent not in found}


def _stat(pid: int) -> list[str]:
    """/proc/<pid>/stat's fields after the command name: [state, ppid, ...]."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def _ppid(pid: int) -> int:
    return int(_stat(pid)[1])


def listening() -> list[tuple[str, str, int, str]]:
    """Every TCP socket in LISTEN on this host, from /proc/net/tcp{,6} (no ss, no root):
    (table, the address as the table prints it, port, ``socket:[inode]``)."""
    out = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            f = row.split()
            if len(f) > 9 and f[3] == "0A":  # 0A: LISTEN
                addr, port = f[1].rsplit(":", 1)
                out.append((table, addr, int(port, 16), f"socket:[{f[9]}]"))
    return out


def listeners(port: int) -> dict[int, str]:
    """pid -> command line of every process holding a TCP socket that listens on ``port`` (any
    address), read from /proc: who keeps a gateway's port when it cannot bind."""
    inodes = {inode for _, _, p, inode in listening() if p == port}
    found: dict[int, str] = {}
    if not inodes:
        return found
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if any(os.readlink(fd) in inodes for fd in (proc / "fd").iterdir()):
                found[int(proc.name)] = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue  # gone meanwhile, or not ours to read
    return found


def orphan_nginx_workers(port: int) -> list[int]:
    """nginx workers whose master is gone that still listen on ``port``: what a gateway master
    killed with SIGKILL leaves holding the port, found even when its record did not list them.
    Orphaned means its parent is no nginx master, not that its parent is pid 1: a subreaper (a
    container's init, a CI runner, systemd --user) adopts orphans under its own pid."""
    out = []
    for pid, cmd in listeners(port).items():
        try:
            ppid = _ppid(pid)
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
        try:
            parent = Path(f"/proc/{ppid}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            parent = ""  # its parent is gone too
        if cmd.startswith("nginx: worker process") and not parent.startswith("nginx: master process"):
            out.append(pid)
    return out


def held_by(port: int) -> str:
    """Who listens on ``port``, in words for an error message."""
    found = listeners(port)
    if not found:
        return "no listener found in /proc: another user's process, or another network namespace"
    return "; ".join(f"pid {pid}: {cmd[:80]}" for pid, cmd in sorted(found.items())[:3])


def master_pid(prefix: Path) -> int | None:
    """The pid of the nginx master running with this prefix, or None (a stale pid file, a reused pid).
    Its pid file first, else the pid its record keeps: a master ended for a listen change deletes
    nginx.pid when it exits, which may be long after its successor wrote its own there."""
    for pid in (_pid_in(prefix / "nginx.pid"), _pid_in(prefix.parent / "gateway.json")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        # nginx rewrites its title: "nginx: master process /usr/sbin/nginx -p <prefix> -c <conf> ..."
        if pid is not None and "nginx: master process" in cmd and str(prefix) in cmd:
            return pid
    return None


def _pid_in(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
        pid = json.loads(text).get("pid") if path.suffix == ".json" else int(text)
    except (OSError, ValueError, AttributeError):
        return None
    return pid if isinstance(pid, int) and pid > 0 else None


def end_master(pid: int, port: int, wait_s: float = 5.0) -> None:
    """End one nginx master before another binds its port at a new address (a reload cannot: the
    port is held at the old one). SIGQUIT: the master and its workers close their listeners at
    once and finish what they carry (worker_shutdown_timeout, as a reload's old workers do), so a
    stream in flight is not cut and the tick does not wait for it; returns once the port is free
    (bounded: TERM, then KILL, only for a master that does not let it go)."""
    for sig in (signal.SIGQUIT, signal.SIGTERM, signal.SIGKILL):
        try:
            os.kill(pid, sig)
        except OSError:
            return
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if bind_free(port) or _gone(pid):
                return
            time.sleep(0.05)


def _gone(pid: int) -> bool:
    """Exited (a zombie counts: it holds nothing)."""
    try:
        return _stat(pid)[0] == "Z"
    except (OSError, IndexError):
        return True
