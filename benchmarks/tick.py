"""The controller's whole tick, not only plan(): CPU, wall time, files and cluster queries per tick.

    python benchmarks/tick.py [--sizes 10,50,200,1000] [--ticks 10] [--profile N]
    python benchmarks/tick.py --smoke      # its smallest size (2 recipes, 2 ticks): CI runs it

Its table is docs/performance.md, section "One tick (benchmarks/tick.py)".

Runs the real ``Controller`` (manifests, state/, desired build, probes, status, events, the
plan, the router's endpoints) against N recipes of 2 mocker workers and a builtin router
each (3 units per recipe). What stands in, so that 1,000 recipes fit this 2-core machine:

- the driver keeps allocations and steps in memory (squeue's own cost is Slurm's; the
  reconciler's side of it, parsing, is timed by benchmarks/plan_scale.py), counts queries,
  and writes each step's log file as a launcher would;
- every worker and router is one port of ``health_farm.py``: one asyncio process
  answering HTTP/1.1 200 with keep-alive, like an engine's /health, and the router's life
  probe (``/health?life=a``) with the life it names, as ``reconciler.router`` does.

Per N it prints: CPU per settled tick (all threads of the process, probes included), per
unit, wall time per tick, files read and written per tick, and cluster queries per minute
when settled and when the allocations wait in Slurm's queue (the loop's own wait at the
default 5 s resync). ``--profile N``: cProfile's top entries for settled ticks at N recipes.
Prints; asserts nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import builtins
import cProfile
import io
import itertools
import os
import pstats
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from reconciler.drivers.base import step_paths  # noqa: E402
from reconciler.drivers.memory import MemoryDriver  # noqa: E402
from reconciler.shell.gateway.sweep import quit_under  # noqa: E402
from reconciler.shell.loop import Controller, next_wait  # noqa: E402

RECIPE = """\
name: {name}
model: {{path: m}}
engine: mocker
resources: {{gpus_per_node: 8}}
frontend: {{type: builtin}}
roles: {{agg: {{workers: 2, gpus: 1}}}}
"""
RESYNC = 5.0
HOST = "127.0.0.1"


class BenchDriver(MemoryDriver):
    """Slurm in memory; each launched unit's port is served by the farm, its log written."""

    def __init__(self, farm: subprocess.Popen, state: Path, pending: bool = False):
        super().__init__(owner="bench", host=HOST, alloc_state="PENDING" if pending else "RUNNING",
                         reason="Resources" if pending else "None", queued_for=3600.0)
        self.farm, self.state = farm, state
        self.served: set[int] = set()

    def on_launch(self, unit, launch):
        port = unit.health_port
        if port and port not in self.served:
            self.farm.stdin.write(f"{port}\n")
            self.farm.stdin.flush()
            answer = self.farm.stdout.readline().split()
            if answer[:1] != ["ok"]:
                raise RuntimeError(f"the farm cannot serve port {port}: {' '.join(answer)}")
            self.served.add(port)
        log = step_paths(self.state, unit, launch).log
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text("INFO starting\nINFO serving on port %d\n" % (port or 0))


class FileCounter:
    """Counts files opened for reading and written (atomic replace or append) while active."""

    def __init__(self):
        self.reads = self.writes = 0
        self._open, self._replace = builtins.open, os.replace

    def __enter__(self):
        real_open, real_replace = self._open, self._replace

        def counting_open(file, mode="r", *a, **kw):
            if isinstance(file, (str, Path)):
                if any(c in mode for c in "wax+"):
                    self.writes += 1
                else:
                    self.reads += 1
            return real_open(file, mode, *a, **kw)

        def counting_replace(src, dst, *a, **kw):
            self.writes += 1
            return real_replace(src, dst, *a, **kw)

        builtins.open = io.open = counting_open  # type: ignore[assignment]
        os.replace = counting_replace  # type: ignore[assignment]
        return self

    def __exit__(self, *exc):
        builtins.open = io.open = self._open  # type: ignore[assignment]
        os.replace = self._replace  # type: ignore[assignment]


def start_farm() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(Path(__file__).with_name("health_farm.py"))], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, bufsize=1)


def port_range() -> tuple[int, int]:
    """$RECONCILER_PORT_RANGE (a test gives each run its own), else 12000-30000: the farm binds every
    port it is given on loopback, and a fixed range met ports other programs on a shared host hold
    ('the farm cannot serve port 12000: address already in use' failed the smoke test)."""
    lo, _, hi = os.environ.get("RECONCILER_PORT_RANGE", "12000-30000").partition("-")
    return int(lo), int(hi)


def controller(tmp: Path, n: int, farm: subprocess.Popen, pending: bool = False) -> tuple[Controller, BenchDriver]:
    m = tmp / "manifests"
    m.mkdir(parents=True)
    for i in range(n):
        (m / f"r{i:04d}.yaml").write_text(RECIPE.format(name=f"r{i:04d}"))
    drv = BenchDriver(farm, tmp / "state", pending)
    lo, hi = port_range()
    # the queued measurement runs beside the settled one's farm, which still serves its ports from
    # lo up: its registry starts half way (its gateways found every port held: PortsExhausted)
    c = Controller(m, tmp / "state", drv, port_range=((lo + hi) // 2, hi) if pending else (lo, hi))
    c.debounce = 0
    return c, drv


def settle(c: Controller, n: int, limit: int = 40):
    for _ in range(limit):
        snap, done = c.tick()
        ready = sum(1 for v in snap.observed.ready.values() if v)
        if not done and ready >= 3 * n:
            return snap
    raise RuntimeError(f"{n} recipes did not settle in {limit} ticks (ready {ready} of {3 * n})")


@contextlib.contextmanager
def scratch() -> Iterator[Path]:
    """A state directory for one measurement. Each recipe's gateway (an nginx daemon the controller
    starts, which outlives it by design) is told to quit before the directory goes: it left one
    nginx per recipe holding its port, for good, after every run."""
    with tempfile.TemporaryDirectory(prefix="tickbench-") as tmp:
        try:
            yield Path(tmp)
        finally:
            quit_under(Path(tmp))


def measure(n: int, ticks: int, profile: bool) -> dict:
    farm = start_farm()
    try:
        with scratch() as tmp:
            c, drv = controller(tmp, n, farm)
            snap = settle(c, n)
            units = sum(len(d.all_units) for d in snap.desired.recipes.values())
            q0 = drv.queries
            # each settled tick a resync apart, as `run` does them: whatever depends on the clock shows
            base = time.time()
            step = itertools.count(1)
            c.clock = lambda: base + RESYNC * next(step)
            prof = cProfile.Profile() if profile else None
            with FileCounter() as files:
                cpu0, wall0 = time.process_time(), time.perf_counter()
                if prof:
                    prof.enable()
                for _ in range(ticks):
                    snap, done = c.tick()
                    assert not done, f"a settled tick acted: {done[:3]}"
                if prof:
                    prof.disable()
                cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
            per_tick_queries = (drv.queries - q0) / ticks
            settled_wait = next_wait(snap, RESYNC)
        with scratch() as tmp:
            cp, dp = controller(tmp, n, farm, pending=True)
            for _ in range(3):
                psnap, _ = cp.tick()
            pending_wait = next_wait(psnap, RESYNC)
            pending_q = (dp.queries / cp.ticks)
    finally:
        farm.kill()
        farm.wait()
    if prof:
        stats = pstats.Stats(prof)
        stats.sort_stats("cumulative").print_stats(25)
        stats.sort_stats("tottime").print_stats(20)
    return {
        "n": n, "units": units, "cpu_ms": 1000 * cpu / ticks, "per_unit_ms": 1000 * cpu / ticks / units,
        "wall_ms": 1000 * wall / ticks, "reads": files.reads / ticks, "writes": files.writes / ticks,
        "q_settled": per_tick_queries * 60 / settled_wait, "q_pending": pending_q * 60 / pending_wait,
        "core_pct": 100 * cpu / ticks / settled_wait,
    }


def main() -> None:
    import logging

    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10,50,200,1000")
    ap.add_argument("--ticks", type=int, default=10)
    ap.add_argument("--profile", type=int, default=0, help="profile the settled ticks at this size")
    ap.add_argument("--smoke", action="store_true", help="the smallest size (2 recipes, 2 ticks): that it runs")
    args = ap.parse_args()
    if args.smoke:
        args.sizes, args.ticks = "2", 2
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.profile and args.profile not in sizes:
        sizes.append(args.profile)
    print(f"settled ticks, {args.ticks} per size; recipes of 2 mocker workers + builtin router; resync {RESYNC:g} s")
    print(f"{'recipes':>8} {'units':>6} {'cpu/tick':>10} {'cpu/unit':>9} {'wall/tick':>10} {'core@resync':>11} "
          f"{'reads/tick':>10} {'writes/tick':>11} {'q/min settled':>13} {'q/min queued':>12}")
    for n in sizes:
        r = measure(n, args.ticks if n < 500 else max(3, args.ticks // 3), n == args.profile)
        print(f"{r['n']:>8} {r['units']:>6} {r['cpu_ms']:>8.1f}ms {r['per_unit_ms']:>7.3f}ms {r['wall_ms']:>8.1f}ms "
              f"{r['core_pct']:>10.2f}% {r['reads']:>10.0f} {r['writes']:>11.0f} {r['q_settled']:>13.0f} "
              f"{r['q_pending']:>12.0f}", flush=True)


if __name__ == "__main__":
    main()
