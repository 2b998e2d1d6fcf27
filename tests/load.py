"""How much slower this machine runs now than when it is quiet: the factor by which a test's waits
for something the test itself caused (its deployment Ready, its reconciler's next passes) are
stretched on a busy host. Never a retry: the same wait, longer, because every process the test
started gets a smaller share of the CPU.

Measured once per session (tests/conftest.py, before xdist starts its workers, which inherit it
through $RECONCILER_LOAD_FACTOR; set that variable to fix it by hand). The calibration is a
pure-Python loop: its fastest short burst is the machine's quiet speed (a burst of a millisecond
usually runs unpreempted even among CPU hogs), its median over longer runs the speed a process
gets now; the factor is their ratio, at least 1 and at most CAP (a wait stretched further would
hide a real hang)."""

from __future__ import annotations

import os
import statistics
import time

ENV = "RECONCILER_LOAD_FACTOR"
CAP = 5.0
BURST, BURSTS = 20_000, 40  # ~1 ms each on the 2-core machine
LONG, LONGS = 500_000, 5  # ~16 ms each when quiet


def _spin(n: int) -> float:
    t0 = time.perf_counter()
    x = 0
    for i in range(n):
        x += i
    return time.perf_counter() - t0


def measure() -> float:
    quiet = min(_spin(BURST) for _ in range(BURSTS)) * (LONG / BURST)
    now = statistics.median(_spin(LONG) for _ in range(LONGS))
    return max(1.0, min(CAP, now / quiet))


def factor() -> float:
    """The session's factor: $RECONCILER_LOAD_FACTOR, measured (and set there) the first time."""
    try:
        return max(1.0, float(os.environ[ENV]))
    except (KeyError, ValueError):
        os.environ[ENV] = f"{measure():.2f}"
        return float(os.environ[ENV])


def scaled(seconds: float) -> float:
    """A wait for something the test caused, stretched by the load factor."""
    return seconds * factor()
