"""The batch step of a gateway that runs in its own Slurm job (``reconcile.gateway.allocation``).

It runs the gateway's nginx in the foreground (``daemon off``) with the config the reconciler
writes under ``state/<recipe>/gateway/`` (a shared file system, as every worker's log is), and the
holder beside it, and keeps both up: a child that exits is started again (the first time at
once, then 1, 2, 4, 8 s), so a crashed nginx costs a second, not a new job in the queue.

The reconciler reaches it only through Slurm: ``scancel --batch --signal=HUP`` (a reload: the
new config, the old workers finish what they carry) reaches this process alone, which passes it
to nginx; ``scancel --batch --signal=QUIT`` (the recipe deleted) stops nginx gracefully and ends
the job. A plain scancel (SIGTERM) stops both at once.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from reconciler.gateway.procs import children_of, quit_nginx_workers

RESTART_BASE_S = 1.0
RESTART_CAP_S = 8.0
RESET_AFTER_S = 60.0  # a child that stayed up this long starts its backoff over
POLL_S = 1.0  # the loop also wakes on every signal (a child's exit is SIGCHLD)
STATUS = "agent.json"


def nginx_argv(nginx: str, prefix: Path) -> list[str]:
    return [nginx, "-p", f"{prefix}/", "-c", str(prefix / "nginx.conf"), "-e", str(prefix / "error.log"),
            "-g", "daemon off;"]


def say(msg: str) -> None:
    print(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} gateway agent: {msg}", flush=True)


class Child:
    """One supervised process: started again after it exits, with a doubling delay."""

    def __init__(self, name: str, argv: list[str], out: Path | None):
        self.name, self.argv, self.out = name, argv, out
        self.proc: subprocess.Popen | None = None
        self.started = 0.0
        self.failures = 0
        self.not_before = 0.0
        self.last_exit: int | None = None

    def start(self) -> None:
        out = open(self.out, "ab") if self.out else None  # noqa: SIM115 - the child keeps it
        try:
            self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT
                                         if out else None, preexec_fn=die_with_parent)
        except OSError as e:
            say(f"{self.name} did not start: {e}")
            self.proc = None
            self._ended()
            return
        finally:
            if out:
                out.close()
        self.started = time.monotonic()
        say(f"{self.name} started (pid {self.proc.pid})")

    def _ended(self) -> None:
        now = time.monotonic()
        if self.started and now - self.started >= RESET_AFTER_S:
            self.failures = 0
        delay = 0.0 if self.failures == 0 else min(RESTART_BASE_S * 2 ** (self.failures - 1), RESTART_CAP_S)
        self.failures += 1
        self.not_before = now + delay

    def check(self) -> None:
        """Start it again if it has exited and its delay is over."""
        if self.proc is not None and self.proc.poll() is not None:
            say(f"{self.name} exited with {self.proc.returncode}")
            self.last_exit = self.proc.returncode
            self.proc = None
            self.gone()
            self._ended()
        if self.proc is None and time.monotonic() >= self.not_before:
            self.start()

    def gone(self) -> None:
        """What its end leaves behind is cleaned up (nothing, by default)."""

    def signal(self, sig: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)


class Nginx(Child):
    """A master killed with SIGKILL leaves its workers serving and holding the port: the next
    master could not bind it. The agent is their subreaper (``main``), so they become its own
    children: once the master is gone they are told to QUIT (finish what they carry, close the
    listener) and reaped (those still carrying a stream, later). Each run's [emerg] lines are
    its own: read from where error.log ended when it started."""

    SETTLED_S = 4.0  # nginx gives up binding after 5 tries 0.5 s apart: up longer than that, it bound

    def __init__(self, name: str, argv: list[str], out: Path | None, log: Path):
        super().__init__(name, argv, out)
        self.log, self.mark = log, 0
        self.error: str | None = None
        self.bind_failed = False
        self.settled = False
        self.orphans: list[int] = []

    def start(self) -> None:
        self.mark, self.settled = log_size(self.log), False
        super().start()

    def check(self) -> None:
        self.orphans = [p for p in self.orphans if not _reaped(p)]
        super().check()

    def gone(self) -> None:
        lines = emerg_since(self.log, self.mark)
        self.bind_failed = any("(98: Address already in use)" in l or "still could not bind()" in l for l in lines)
        self.error = next((l for l in reversed(lines) if "still could not bind()" not in l), None) or (
            lines[-1] if lines else None)
        left = quit_nginx_workers(children_of(os.getpid()))
        deadline = time.monotonic() + 2.0  # idle ones go at once; one carrying a stream closed its listener
        while left and time.monotonic() < deadline:
            left = [p for p in left if not _reaped(p)]
            time.sleep(0.05)
        self.orphans += left

    def settle(self) -> bool:
        """Whether it has just become settled (up past its bind retries): said once per run."""
        if self.settled or self.proc is None or time.monotonic() - self.started < self.SETTLED_S:
            return False
        self.settled, self.bind_failed, self.error = True, False, None
        return True


def _reaped(pid: int) -> bool:
    try:
        return os.waitpid(pid, os.WNOHANG)[0] == pid
    except ChildProcessError:
        return True


def subreaper() -> None:
    """Orphans of this process's children become its own (Linux prctl PR_SET_CHILD_SUBREAPER)."""
    import ctypes
    try:
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)
    except (OSError, AttributeError):
        say("cannot become the subreaper of nginx's workers: a killed master's workers may hold the port")


def run(nginx: Child, holder: Child | None, status: Path | None = None) -> int:
    wake_r, wake_w = socket.socketpair()
    wake_w.setblocking(False)
    wake_r.setblocking(False)
    signal.set_wakeup_fd(wake_w.fileno())  # each signal's number is written there as a byte
    for sig in (signal.SIGHUP, signal.SIGTERM, signal.SIGINT, signal.SIGQUIT, signal.SIGCHLD):
        signal.signal(sig, lambda _s, _f: None)  # a handler of our own (not the default), read off the socket
    children = [c for c in (nginx, holder) if c is not None]
    for c in children:
        c.start()
    report(status, nginx)
    while True:
        select.select([wake_r], [], [], POLL_S)
        signals: list[int] = []
        try:
            while data := wake_r.recv(512):
                signals += list(data)
        except BlockingIOError:
            pass
        stop = next((s for s in signals if s in (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT)), None)
        if stop is not None:
            return shutdown(nginx, holder, stop)
        if signal.SIGHUP in signals:
            say("reloading nginx (SIGHUP)")
            nginx.signal(signal.SIGHUP)
        was = nginx.proc
        for c in children:
            c.check()
        if nginx.proc is not was or (isinstance(nginx, Nginx) and nginx.settle()):
            report(status, nginx)


def report(status: Path | None, nginx: Child) -> None:
    """``agent.json`` (the prefix, on the shared file system): which job runs it, whether nginx
    runs (``settled``: up past its bind retries), and why the last one exited: its own [emerg]
    lines (``bindFailed``: another process holds the port)."""
    if status is None:
        return
    doc = {"job": os.environ.get("SLURM_JOB_ID"), "host": socket.gethostname(), "at": time.time(),
           "nginxPid": nginx.proc.pid if nginx.proc is not None else None, "settled": nginx.settled,
           "lastExit": nginx.last_exit, "error": nginx.error, "bindFailed": nginx.bind_failed}
    tmp = status.with_name(status.name + ".tmp")
    try:
        tmp.write_text(json.dumps(doc))
        tmp.replace(status)
    except OSError as e:
        say(f"cannot write {status}: {e}")


def emerg_since(log: Path, offset: int) -> list[str]:
    """The [emerg] lines nginx wrote to ``log`` past ``offset`` (its own run's), without the
    time and pid prefix."""
    try:
        with open(log, "rb") as f:
            f.seek(max(offset, f.seek(0, 2) - 65536))
            lines = f.read().decode(errors="replace").splitlines()
    except OSError:
        return []
    return [l.split(": ", 1)[-1] for l in lines if "[emerg]" in l]


def log_size(log: Path) -> int:
    try:
        return log.stat().st_size
    except OSError:
        return 0


def die_with_parent() -> None:
    """In the child, before exec: SIGTERM when the agent dies (killed: OOM, SIGKILL), so no nginx
    or holder keeps serving outside the job (proctrack/linuxproc would not find them)."""
    import ctypes
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG


def shutdown(nginx: Child, holder: Child | None, sig: int) -> int:
    """QUIT: nginx finishes what it carries; TERM/INT: nginx stops at once. The holder answers what
    it holds (its own TERM handling) either way."""
    say(f"stopping ({signal.Signals(sig).name})")
    nginx.signal(signal.SIGQUIT if sig == signal.SIGQUIT else signal.SIGTERM)
    if holder is not None:
        holder.signal(signal.SIGTERM)
    for c in (nginx, holder):
        if c is not None and c.proc is not None:
            c.proc.wait()
    say("stopped")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="reconciler.gateway.agent")
    ap.add_argument("--prefix", required=True, type=Path)
    ap.add_argument("--nginx", required=True)
    ap.add_argument("--holder", nargs=argparse.REMAINDER, default=[],
                    help="the holder's argv (everything after this flag); none: no holder")
    a = ap.parse_args(argv)
    prefix = a.prefix.absolute()
    (prefix / "tmp").mkdir(parents=True, exist_ok=True)
    os.chdir(prefix)
    nginx = Nginx("nginx", nginx_argv(a.nginx, prefix), None, prefix / "error.log")
    holder = Child("holder", a.holder, prefix / "holder.log") if a.holder else None
    subreaper()
    say(f"on {socket.gethostname()}, prefix {prefix}")
    return run(nginx, holder, prefix / STATUS)


if __name__ == "__main__":
    sys.exit(main())
