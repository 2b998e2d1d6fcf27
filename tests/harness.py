"""The end-to-end harness: one `reconciler run` per test on its own port range, read back
from the cluster itself (squeue for Slurm, the process table for local)."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from helpers import NotYet, wait_until
from load import scaled
from reconciler import labels

def sh(*argv: str) -> str:
    """A command's output. Its failure (a loaded slurmctld timing out a squeue) is NotYet: a poll
    asks again, anything else fails on it; it is not an AssertionError, which a poll never retries."""
    r = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        raise NotYet(f"{' '.join(argv)}: exit {r.returncode}: {r.stderr.strip()}")
    return r.stdout


def job_fields(job: str) -> dict[str, str]:
    """``scontrol show job``'s KEY=VALUE fields of one job."""
    return dict(t.split("=", 1) for t in sh("scontrol", "-o", "show", "job", job).split() if "=" in t)


def slurm_epoch(stamp: str) -> float:
    """A time as scontrol prints it (StartTime, EndTime: this host's local time) in epoch seconds."""
    return time.mktime(time.strptime(stamp, "%Y-%m-%dT%H:%M:%S"))


def scancel(job_or_step: str) -> None:
    """Kill a job or step the test just saw live. A loaded slurmctld can answer a retried kill
    RPC with "Invalid job id" once the first one did its work: the object is gone either way
    (the reconciler's driver reads scancel the same way)."""
    r = subprocess.run(["scancel", job_or_step], capture_output=True, text=True, timeout=60)
    if r.returncode != 0 and "Invalid job id" not in r.stderr:
        raise AssertionError(f"scancel {job_or_step}: exit {r.returncode}: {r.stderr.strip()}")


# Wide ranges, at the top of the span, apart from every 100-port range: a real vLLM takes 52 ports
# per life (HTTP, NIXL and the 50 of its VLLM_PORT scan block), so two lives (a surge, or two
# workers) need more than 100. Each slot belongs to one module (tests/test_vllm_real_e2e.py: 0,
# test_vllm_real_router_e2e.py: 1, test_vllm_real_autoscale_e2e.py: 2), which conftest's scheduler
# keeps on one worker.
WIDE, WIDE_SLOTS = 200, 3


def _span() -> tuple[int, int]:
    # RECONCILER_TEST_PORTS=LO-HI narrows the span, so two test runs on one machine can keep apart
    lo, _, hi = os.environ.get("RECONCILER_TEST_PORTS", "21000-31800").partition("-")
    return int(lo), int(hi)


def _port_ranges() -> itertools.cycle:
    """This process's 100-port ranges: under pytest-xdist each worker cycles through its own slice
    of 21000-31800 (or $RECONCILER_TEST_PORTS) below the wide ranges, so two tests running at once
    never share a port range."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    n = max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    lo, hi = _span()
    starts = list(range(lo, hi - WIDE * WIDE_SLOTS - 99, 100))  # each whole 100 below the wide ranges
    mine = starts[int(worker.removeprefix("gw") or 0) % n::n]
    if not mine:
        raise RuntimeError(f"RECONCILER_TEST_PORTS={lo}-{hi} is too narrow: {WIDE * WIDE_SLOTS} ports for the "
                           f"wide ranges and 100 for each of {n} workers at least")
    return itertools.cycle(mine)


def wide_range(slot: int) -> tuple[int, int]:
    """Wide range ``slot`` (0 to WIDE_SLOTS - 1) of the span: each slot belongs to one module (see WIDE)."""
    if not 0 <= slot < WIDE_SLOTS:
        raise ValueError(f"wide range {slot}: there are {WIDE_SLOTS}")
    hi = _span()[1] - WIDE * slot
    return hi - WIDE, hi - 1


if __name__ != "harness":  # as tests.harness it would be a second module with a second cycle,
    # handing out a range the first gave a moment ago (its processes may still hold ports)
    raise ImportError("import the test harness as `harness` (tests/ is on the path), not as " + __name__)
_ranges = _port_ranges()


def _newer(a: str, b: str) -> bool:
    """Whether step (or pid) ``a`` is newer than ``b``."""
    def num(s: str) -> tuple[int, ...]:
        return tuple(int(x) for x in s.replace("_", ".").split(".") if x.isdigit())
    return num(a) > num(b)


def _forked_launcher(pid: str, cmd: list[bytes]) -> bool:
    """Whether the process is a fork of a launcher (its parent has the same command line)."""
    try:
        ppid = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1]
        return Path(f"/proc/{ppid}/cmdline").read_bytes().split(b"\0") == cmd
    except (OSError, IndexError):
        return False


# seconds (x the load factor) a reconciler process may take to start and make a pass: at load 21
# on 2 cores (the suite under --load 1) a start alone took 64 s, and the teardown's `run --once`
# (and a CLI call) timed out at 60 s x 1.17 in a soak run of 2026-12-07
START = 180


class Harness:
    def __init__(self, tmp: Path, driver: str, wide: int | None = None):
        self.tmp = tmp
        self.driver = driver
        # each test its own port range: a previous test's workers may still be shutting down
        lo, hi = wide_range(wide) if wide is not None else (lo := next(_ranges), lo + 99)
        self.env = {**os.environ, "RECONCILER_PORT_RANGE": f"{lo}-{hi}"}
        self.manifests = tmp / "manifests"
        self.state = tmp / "state"
        self.manifests.mkdir()
        self.proc: subprocess.Popen | None = None
        self.names: list[str] = []
        self.owner = labels.default_owner(self.state)

    def name(self, prefix: str) -> str:
        n = f"{prefix}-{uuid.uuid4().hex[:6]}"
        self.names.append(n)
        return n

    # ---------------------------------------------------------------- the reconciler
    def start(self, *extra: str) -> None:
        """Start ``reconciler run`` and return once it has made its first pass (or exited). At load
        21 on 2 cores (a soak under --load 1) a start took 64 s to log "reconciler started" (a
        Python start at a tenth of a core), so a test's next wait, sized for the reconciler's
        work, spent itself on the start: it waits for the work, this for the start. A standby may
        wait for its lease all along: its start is not waited for."""
        log = open(self.tmp / "reconciler.log", "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "reconciler.cli", "run", "--manifests", str(self.manifests), "--state",
             str(self.state), "--driver", self.driver, "--resync", "1", *extra],
            stdout=log, stderr=subprocess.STDOUT, cwd=self.tmp, env=self.env,
        )
        if "--standby" not in extra:
            wait_until(self._first_pass_made, timeout=scaled(START), interval=0.1,
                       what=lambda: f"the reconciler's first pass (log:\n{self.log()[-3000:]})")

    def _first_pass_made(self) -> bool:
        """This process wrote state/controller.json (after every pass, failed or not), or it ended."""
        if self.proc is None or self.proc.poll() is not None:
            return True
        try:
            return json.loads((self.state / "controller.json").read_text()).get("pid") == self.proc.pid
        except (FileNotFoundError, ValueError):
            return False

    def kill9(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> int:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            return self.proc.wait(scaled(20))
        return self.proc.returncode if self.proc else 0

    def cli(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "reconciler.cli", *args, "--manifests", str(self.manifests),
                               "--state", str(self.state), "--driver", self.driver],
                              capture_output=True, text=True, timeout=scaled(START), cwd=self.tmp, env=self.env)

    def get(self, name: str) -> dict:
        r = self.cli("get", name, "-o", "json")
        if r.returncode != 0:  # as sh: the CLI's squeue may time out on a loaded slurmctld
            raise NotYet(f"reconciler get {name}: exit {r.returncode}: {r.stderr.strip()}")
        return json.loads(r.stdout)[0]

    def log(self) -> str:
        return (self.tmp / "reconciler.log").read_text()

    def ticks(self) -> int:
        """Ticks the running reconciler has completed (state/controller.json). Each process counts
        from 1: the file of one that is gone (killed, restarted) counts 0, not its last count (a
        wait for "one more tick" after a restart then waited for the new process to pass the old
        one's count, 30 s for 30 passes: the gateway job e2e's idle after kill9 and start)."""
        try:
            data = json.loads((self.state / "controller.json").read_text())
        except (FileNotFoundError, ValueError):
            return 0
        if self.proc is not None and data.get("pid") != self.proc.pid:
            return 0
        return data["ticks"]

    def actions(self, recipe: str) -> list[dict]:
        """Actions the reconciler took for ``recipe`` (from its events)."""
        try:
            lines = (self.state / "events.jsonl").read_text().splitlines()
        except FileNotFoundError:
            return []
        kinds = {"SubmitAlloc", "LaunchStep", "CancelStep", "CancelAlloc"}
        return [e for e in map(json.loads, lines) if e["recipe"] == recipe and e["kind"] in kinds]

    def idle(self, recipe: str, ticks: int = 3) -> None:
        """Wait for ``ticks`` more ticks of the running reconciler; none of them may act on ``recipe``."""
        # from a tick boundary: whatever the tick in progress does is its own, not ours to count
        first = self.ticks()
        wait_until(lambda: self.ticks() > first, timeout=scaled(30), what="the tick in progress to end")
        before, start = len(self.actions(recipe)), self.ticks()
        wait_until(lambda: self.ticks() >= start + ticks, timeout=scaled(30), what=f"{ticks} more ticks")
        assert self.actions(recipe)[before:] == [], f"{ticks} ticks should have changed nothing for {recipe}"

    # ---------------------------------------------------------------- the cluster, read directly
    def steps(self, recipe: str) -> dict[str, tuple[str, str]]:
        """unit name -> (step id, node) of the recipe's live steps, from the cluster itself. A unit
        has two life slots (a surge life runs beside the old one): then its newest step is given."""
        out: dict[str, tuple[str, str]] = {}
        slot_of: dict[str, str] = {}

        def put(unit: str, slot: str, sid: str, node: str) -> None:
            if unit in out:
                assert slot_of[unit] != slot, f"duplicate step for {unit}: {out[unit]} and {sid}"
                if _newer(out[unit][0], sid):
                    return
            out[unit], slot_of[unit] = (sid, node), slot

        if self.driver == "slurm":
            for line in sh("squeue", "-h", "-s", "-o", "%i|%j|%N").splitlines():
                sid, name, node = line.split("|")
                parts = name.split(":")
                if len(parts) == 7 and parts[0] == "rcl" and parts[1] == self.owner and parts[2] == labels.recipe_tag(recipe):
                    put(f"{parts[3]}_{parts[4].rstrip('b')}", parts[4][-1], sid, node)
        else:
            for pid in os.listdir("/proc"):
                if not pid.isdigit():
                    continue
                try:
                    cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                except OSError:
                    continue
                if len(cmd) > 4 and cmd[0] == b"/bin/sh" and cmd[3].startswith(f"rcl:{self.owner}:".encode()):
                    if _forked_launcher(pid, cmd):
                        continue  # the launcher's own fork, before its exec: not a second step
                    status = Path(cmd[4].decode())
                    if status.parent.parent.name == recipe and status.is_relative_to(self.state.absolute()):
                        unit = status.name.split(".")[0]
                        put(unit.removesuffix("@b"), unit[-1], pid, "localhost")
        return out

    def lives(self, recipe: str) -> list[tuple[str, int, str]]:
        """(unit, slot, step id) of every live step of the recipe, on Slurm: both lives of a
        surging worker are listed."""
        out = []
        for line in sh("squeue", "-h", "-s", "-o", "%i|%j").splitlines():
            sid, name = line.split("|")
            parts = name.split(":")
            if len(parts) == 7 and parts[:3] == ["rcl", self.owner, labels.recipe_tag(recipe)]:
                out.append((f"{parts[3]}_{parts[4].rstrip('b')}", int(parts[4].endswith("b")), sid))
        return sorted(out)

    def jobs(self, recipe: str) -> list[str]:
        if self.driver == "slurm":
            return [l.split("|")[0] for l in sh("squeue", "-h", "-o", "%i|%j").splitlines()
                    if l.split("|")[1].startswith(f"rcl:{self.owner}:{labels.recipe_tag(recipe)}:")]
        data = json.loads((self.state / "local" / "allocs.json").read_text()) if (self.state / "local" / "allocs.json").exists() else {}
        return [j for j, r in data.items() if r["name"].startswith(f"rcl:{self.owner}:{labels.recipe_tag(recipe)}:")]

    def wait_steps(self, recipe: str, units: set[str], timeout: float = 60) -> dict:
        return wait_until(lambda: (s := self.steps(recipe)) and set(s) == units and s, timeout=scaled(timeout),
                          what=lambda: f"steps {sorted(units)} (reconciler log:\n{self.log()[-3000:]})")

    def wait_ready(self, recipe: str, timeout: float = 60) -> dict:
        return wait_until(lambda: (g := self.get(recipe))["status"] == "Ready" and g, timeout=scaled(timeout),
                          what=lambda: f"{recipe} Ready (reconciler log:\n{self.log()[-3000:]})")

    def cleanup(self) -> None:
        """Tear down everything the test deployed; fails (AssertionError) when the teardown run
        fails or a step of the test's recipes is still there 30 s later: a leak is a failure of
        the test that left it, not something to sweep up quietly. Leftovers are killed either way,
        so the next test starts clean."""
        self.stop()
        for f in self.manifests.glob("*.yaml"):
            f.unlink()
        r = subprocess.run([sys.executable, "-m", "reconciler.cli", "run", "--once", "--allow-empty", "--manifests",
                            str(self.manifests), "--state", str(self.state), "--driver", self.driver],
                           capture_output=True, text=True, timeout=scaled(START), cwd=self.tmp, env=self.env)
        problems = [] if r.returncode == 0 else [f"the teardown run exited {r.returncode}: {r.stderr.strip()[-2000:]}"]
        if self.driver == "slurm":
            for n in self.names:
                subprocess.run(["scancel", "--jobname", f"rcl:{self.owner}:{n}:a0"], capture_output=True)
                subprocess.run(["scancel", "--jobname", f"rcl:{self.owner}:{n}:a1"], capture_output=True)
                subprocess.run(["scancel", "--jobname", labels.gateway_job_name(self.owner, n)], capture_output=True)
        # the gateways (nginx masters on this host) were stopped by the run above; any left is killed
        for pidfile in self.state.glob("*/gateway/nginx.pid"):
            try:
                os.kill(int(pidfile.read_text().strip()), signal.SIGQUIT)
            except (OSError, ValueError):
                pass
        for pidfile in self.state.glob("*/gateway/holder.pid"):  # scale to zero: the gateway's holder
            try:
                os.kill(int(pidfile.read_text().strip()), signal.SIGTERM)
            except (OSError, ValueError):
                pass
        # leave nothing behind for the next test
        deadline = time.monotonic() + scaled(30)
        left = self._left()
        while time.monotonic() < deadline and left:
            time.sleep(0.2)
            left = self._left()
        if left:
            problems.append(f"steps still running {scaled(30):.0f} s after the teardown: {left}")
            for name, steps in left.items():
                for sid, _node in steps.values() if name in self.names else ():
                    if self.driver == "local":
                        try:
                            os.killpg(int(sid), signal.SIGKILL)
                        except ProcessLookupError:
                            pass
                    else:
                        subprocess.run(["scancel", sid], capture_output=True)
        assert not problems, "cleanup: " + "; ".join(problems)

    def _left(self) -> dict[str, dict]:
        """The test's recipes that still have steps (a squeue that fails counts as not known yet)."""
        try:
            return {n: st for n in self.names if (st := self.steps(n))}
        except NotYet as e:
            return {"(squeue failed)": {"": (str(e), "")}}
