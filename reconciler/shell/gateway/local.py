"""This host's nginx: where its binary is, the name clients reach this host by, a master's workers,
and the workers a killed master left holding its port."""

from __future__ import annotations

import os
import shutil
import socket
import time

from reconciler.gateway.procs import children_of, quit_nginx_workers
from reconciler.shell.gateway.bindcheck import bind_free
from reconciler.shell.gateway.sweep import orphan_nginx_workers


def nginx_binary() -> str | None:
    """Debian installs nginx in /usr/sbin, which a non-root PATH may not list."""
    return shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx", "/usr/local/sbin/nginx")
                                          if os.access(p, os.X_OK)), None)


def gateway_host() -> str:
    """The name clients reach this host by (the node name Slurm would use for it)."""
    return socket.gethostname()


def workers_of(pid: int) -> list[int]:
    """The master's worker processes (kept so that orphans of a killed master can be stopped)."""
    return sorted(children_of(pid))


def stop_orphans(pids: list[int], port: int) -> None:
    """Workers outlive a master killed with SIGKILL and keep the listening socket (and serving
    with the old upstreams). SIGQUIT makes each close its listener at once and finish its
    requests; the new master can bind once they have let go (bounded wait)."""
    quit_nginx_workers({*pids, *([] if bind_free(port) else orphan_nginx_workers(port))})
    deadline = time.monotonic() + 5.0
    while not bind_free(port) and time.monotonic() < deadline:
        time.sleep(0.01)
