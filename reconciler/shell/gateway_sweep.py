"""Stop every gateway process (nginx masters, holders) under a state directory that goes for good.

Kept apart from shell/gateway.py (which re-exports it): it needs nothing of the running gateways'
bookkeeping, only the processes' command lines.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from reconciler.shell import holder


def quit_under(root: Path) -> list[int]:
    """Tell every gateway master whose prefix is under ``root`` to quit (SIGQUIT: graceful), by its
    own pid; the pids told. A gateway is a daemon on this host that outlives the reconciler by design
    (workloads keep running when it stops): whoever removes a state directory for good (a benchmark's
    teardown, a test session) stops its gateways first, or they hold their ports with no record left."""
    told = []
    # by the processes themselves, not only the pid files: a state directory wiped under a running
    # reconciler leaves its gateway's master running with no pid file to find it by
    where = f"-p {Path(root)}"
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if cmd.startswith("nginx: master process") and where in cmd:
                os.kill(int(proc.name), signal.SIGQUIT)
                told.append(int(proc.name))
        except (OSError, ValueError):
            continue
    return told + holder.quit_holders_under(Path(root))
