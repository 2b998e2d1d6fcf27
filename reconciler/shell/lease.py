"""The lease on a state directory: one active ``reconciler run``, and standbys (``run --standby``, this
host or another that mounts it) that take over when it dies or stops making passes.

The lease is the lock on state/run.lock (``flock``; on NFS the kernel maps it onto POSIX locks,
which the lock manager releases when the holder's process or host dies). The kernel drops it
the moment the active process dies, kill -9 included; the standby polls every second, so it
takes over within a second or two and adopts everything from the cluster (labels) and state/
like any restarted controller: nothing is launched twice.

A process that is alive but makes no pass (``kill -STOP``, a hung pass) keeps its flock. So the
lease also has a heartbeat: the holder touches run.lock (its mtime) at the end of every pass,
failed or not, and sleeps at most a third of the term between passes. A standby that finds the
heartbeat older than the term (``run --lease-timeout``, default 30 s; the longer of its own and
the one the active run recorded in run.json) seizes the lease: it locks a new file and renames
it over run.lock. The old holder is fenced by that rename: before each pass, each action and
each write of a pass it checks that run.lock is still the file it locked; if not (and it cannot
lock the new one), it raises LeaseLost and stops without acting. The heartbeat is compared with
the standby's clock: across hosts the clocks must agree to well within the term (NTP).

While a standby waits it says so in state/standby.json, which ``get`` reads with controller.json
to show who is active (and warns when the heartbeat is older than the term).
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

from reconciler.errors import ReconcilerError
from reconciler.fsutil import atomic_write_text
from reconciler.timefmt import iso


def _log():
    """structlog on first use: `get` imports describe() and must not pay ~0.7 s for it."""
    import structlog

    return structlog.get_logger("reconciler")


POLL = 1.0  # seconds between attempts: the takeover comes within this of the active one's death
STANDBY = "standby.json"
LOCK = "run.lock"
DEFAULT_TERM = 30.0  # seconds without a pass after which a standby takes over
TERM_BOUNDS = (5.0, 3600.0)  # shorter than a few passes would take over from a busy controller
TERM_KEY = "leaseTimeout"  # run.json's key for the active run's term


class LeaseLost(ReconcilerError):
    """Another reconciler took the state directory over: this one must act on nothing more."""


class Lease:
    """This controller's hold on state/run.lock."""

    def __init__(self, root: Path, term: float = DEFAULT_TERM):
        self.root = root
        self.term = term
        self.file: IO[str] | None = None

    @property
    def path(self) -> Path:
        return self.root / LOCK

    def acquire(self) -> None:
        """Take the lock if nobody holds it (ReconcilerError otherwise): one try, no wait."""
        self.root.mkdir(parents=True, exist_ok=True)
        f = open(self.path, "a+")  # noqa: SIM115 - held for the life of the controller
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip() or "?"
            f.close()
            raise ReconcilerError(
                f"another reconciler (pid {holder}) is running on {self.root.absolute()}; stop it first"
            ) from None
        f.seek(0)
        f.truncate()
        f.write(f"{os.getpid()}\n")  # also the first heartbeat (the file's mtime)
        f.flush()
        self._hold(f)

    def seize(self) -> None:
        """Take the lease from a holder that stopped making passes: a new file, locked before anyone
        can see it, renamed over run.lock. The old holder finds run.lock is no longer its file."""
        tmp = self.root / f".{LOCK}.{os.getpid()}"
        f = open(tmp, "w+")  # noqa: SIM115 - held for the life of the controller
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a file nobody else has opened
        f.write(f"{os.getpid()}\n")
        f.flush()
        os.replace(tmp, self.path)
        self._hold(f)

    def _hold(self, f: IO[str]) -> None:
        old, self.file = self.file, f
        if old is not None:
            old.close()

    def ours(self) -> bool:
        """Whether run.lock is still the file this controller locked."""
        if self.file is None:
            return True
        try:
            return os.stat(self.path).st_ino == os.fstat(self.file.fileno()).st_ino
        except FileNotFoundError:
            return False

    def keep(self) -> bool:
        """True if run.lock was gone or replaced and is now ours again (``rm -rf state/*``: a lock on
        a deleted file keeps nobody out). LeaseLost if another holds the new file (a standby seized
        it, or another ``run`` started on the new file)."""
        if self.ours():
            return False
        try:
            self.acquire()
        except ReconcilerError as e:
            raise LeaseLost(str(e)) from None
        return True

    def beat(self) -> None:
        """The heartbeat: run.lock's mtime is the end of the last pass."""
        if self.file is not None:
            os.utime(self.file.fileno())


def heartbeat_age(root: Path, now: float) -> float | None:
    """Seconds since the holder's last pass ended (or it took the lock), None without a lock file."""
    try:
        return max(0.0, now - os.stat(root / LOCK).st_mtime)
    except OSError:
        return None


def recorded_term(root: Path) -> float | None:
    """The active run's term, as it recorded it in run.json."""
    try:
        term = json.loads((root / "run.json").read_text()).get(TERM_KEY)
    except (OSError, ValueError, AttributeError):
        return None
    lo, hi = TERM_BOUNDS
    return float(term) if isinstance(term, int | float) and lo <= term <= hi else None


def wait_for_lease(lock: Callable[[], None], root: Path, stopped: Callable[[], bool],
                   sleep: Callable[[float], object] = time.sleep, poll: float = POLL, *,
                   seize: Callable[[], None] | None = None, term: float = DEFAULT_TERM,
                   clock: Callable[[], float] = time.time) -> bool:
    """Take the lock (``lock`` raises ReconcilerError while another holds it), waiting as the
    standby until then; with ``seize``, take the lease from a holder whose heartbeat is older than
    the term. False: stopped while waiting."""
    said = False
    mine = root / STANDBY
    while not stopped():
        try:
            lock()
        except ReconcilerError as e:
            if not said:
                _log().info("standby: waiting for the active reconciler", holder=str(e))
                said = True
            limit = max(term, recorded_term(root) or 0.0)
            age = heartbeat_age(root, clock())
            if seize is not None and age is not None and age > limit:
                _log().warning("standby: the active reconciler made no pass within the lease term; taking over",
                               holder=str(e), last_pass_ago=f"{age:.0f}s", term=f"{limit:g}s")
                seize()
                _forget(mine)
                return True
            try:
                atomic_write_text(mine, json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                                    "since": iso(clock())}) + "\n")
            except OSError:
                pass  # the wait goes on without the note
            sleep(poll)
            continue
        _forget(mine)
        if said:
            _log().warning("standby: the active reconciler is gone; taking over")
        return True
    return False


def _forget(note: Path) -> None:
    try:
        if json.loads(note.read_text()).get("pid") == os.getpid():
            note.unlink()
    except (OSError, ValueError):
        pass


def describe(root: Path, now: float | None = None) -> str:
    """One line for ``get``: which controller is active (it holds the lock), which waits, and a
    warning when the active one made no pass within its lease term."""
    def read(name: str) -> dict:
        try:
            data = json.loads((root / name).read_text())
            return data if isinstance(data, dict) else {}
        except (OSError, ValueError):
            return {}

    held = False
    try:
        with open(root / LOCK) as f:  # noqa: PTH123 - never created here (get writes nothing)
            try:
                fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
                fcntl.flock(f, fcntl.LOCK_UN)
            except BlockingIOError:
                held = True
    except OSError:
        pass
    active = read("controller.json")
    line = (f"controller: active pid {active.get('pid', '?')} on {active.get('host', '?')} "
            f"(last pass {active.get('lastTick', '?')})" if held else "controller: none running")
    standby = read(STANDBY)
    if held and standby:
        line += f"; standby pid {standby.get('pid', '?')} on {standby.get('host', '?')} since {standby.get('since', '?')}"
    age = heartbeat_age(root, time.time() if now is None else now) if held else None
    term = recorded_term(root) or DEFAULT_TERM
    if age is not None and age > term:
        line += (f"\nWARNING: the active controller made no pass for {age:.0f}s (lease term {term:g}s): "
                 "it is stopped or hung; a standby (run --standby) takes over after the term")
    return line
