"""Benchmarks that cannot rot: each script under benchmarks/ runs at its smallest size (``--smoke``).

Marked ``bench`` (and ``slurm`` / ``multinode`` where it needs that cluster, so CI's strict mode
fails instead of skipping). What is asserted is only that the benchmark completes and prints its
table: the header, then a row with numbers. Never a figure: timing is the benchmark's to report,
not a test's to judge. A script added to benchmarks/ without an entry here fails
``test_every_benchmark_has_a_smoke_test``; each names its section of docs/performance.md.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import harness
from helpers import get, wait_until

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
PERFORMANCE = ROOT / "docs" / "performance.md"
STRICT = os.environ.get("RECONCILER_REQUIRE_SLURM") == "1"
NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?:ms|s|%)?(?![\w.])")


@dataclass(frozen=True)
class Smoke:
    header: str  # a regex the table's header line matches
    numbers: int  # a row of the table: a later line with at least this many numbers
    marks: tuple = ()
    needs: tuple[str, ...] = field(default=())  # files under the checkout it needs (installed stacks)
    root: bool = False  # needs root (scontrol update)
    timeout: float = 240.0  # seconds the --smoke run may take


SMOKES = {
    "tick.py": Smoke(r"recipes\s+units\s+cpu/tick", 9),
    "plan_scale.py": Smoke(r"recipes\s+workers\s+plan\(\) ms", 6),
    "read_commands.py": Smoke(r"command\s+median s\s+min s", 6),
    "mocker_bench.py": Smoke(r"path\s+streams\s+req/s", 8),
    "gateway_keys.py": Smoke(r"round\s+gateway\s+p50 ms", 4, (pytest.mark.needs("nginx"),)),
    "converge.py": Smoke(r"run\s+workers\s+drop -> healthy s", 4, (pytest.mark.slurm,)),
    "mttr.py": Smoke(r"^\s+what\s+figure$", 2, (pytest.mark.slurm,)),
    "node_failure.py": Smoke(r"run\s+how\s+failed node", 4, (pytest.mark.multinode,), root=True),
    "autoscale.py": Smoke(r"run\s+requests\s+failed\s+within %", 5, (pytest.mark.slurm,)),
    "continuity.py": Smoke(r"^\| fault \| stack \| frontends", 5, (pytest.mark.slurm,),
                           needs=(".stacks/dynamo/bin/python",)),
    "stacks.py": Smoke(r"^\| stack \| conc \| req/s", 9, (pytest.mark.slurm,),
                       needs=(".stacks/aiperf/bin/aiperf", ".stacks/dynamo/bin/python")),
    # a real vLLM's cold start (minutes on two busy cores), then aiperf: the recipe's health budget bounds it
    "real_engine.py": Smoke(r"^\| engine \| conc \| req/s", 6, (pytest.mark.slurm, pytest.mark.timeout(1900)),
                            needs=(".stacks/aiperf/bin/aiperf", ".stacks/vllm/bin/vllm"), timeout=1800.0),
}
# not a benchmark of its own: tick.py's stand-in engine, run by test_health_farm_answers_as_engine_and_router
HELPERS = {"health_farm.py": "test_health_farm_answers_as_engine_and_router",
           "traffic.py": "test_benchmark_runs_at_its_smallest_size[continuity]",  # its client loop
           "autoscale_load.py": "test_benchmark_runs_at_its_smallest_size[autoscale]"}  # its load and clients


def table(out: str, header: str, numbers: int) -> tuple[str, str]:
    """The header line and the first row after it with ``numbers`` numbers (AssertionError otherwise)."""
    lines = out.splitlines()
    at = next((i for i, line in enumerate(lines) if re.search(header, line)), None)
    assert at is not None, f"no table header /{header}/ in:\n{out[-3000:]}"
    row = next((line for line in lines[at + 1:] if len(NUMBER.findall(line)) >= numbers), None)
    assert row is not None, f"no row with {numbers} numbers after {lines[at]!r} in:\n{out[-3000:]}"
    return lines[at], row


def test_every_benchmark_has_a_smoke_test():
    scripts = sorted(p.name for p in BENCH.glob("*.py"))
    assert scripts, f"no benchmarks in {BENCH}"
    missing = [s for s in scripts if s not in SMOKES and s not in HELPERS]
    assert not missing, f"benchmarks without a smoke test (add them to SMOKES in {Path(__file__).name}): {missing}"
    assert sorted({*SMOKES, *HELPERS}) == scripts, "SMOKES names a benchmark that is gone"


@pytest.mark.parametrize("script", sorted(SMOKES))
def test_every_benchmark_names_its_performance_section(script):
    doc = ast.get_docstring(ast.parse((BENCH / script).read_text())) or ""
    m = re.search(r'docs/performance\.md, section "([^"]+)"', doc)
    assert m, f"{script}'s docstring does not name its docs/performance.md section"
    headings = [line.lstrip("#").strip().replace("`", "") for line in PERFORMANCE.read_text().splitlines()
                if line.startswith("## ")]
    assert m.group(1) in headings, f"{script}: no section {m.group(1)!r} in docs/performance.md ({headings})"
    assert "--smoke" in doc, f"{script}'s docstring does not show its smallest size (--smoke)"


# the marker's order: pytest-xdist hands the first tests out in consecutive pairs, so the longest
# smokes (tens of seconds on 2 cores) are each paired with a short one and start on different
# workers; the rest follow by name (-m bench -n 4: 75 s wall in name order, see docs/performance.md)
LONGEST_FIRST = ("real_engine.py", "autoscale.py", "tick.py", "continuity.py", "plan_scale.py", "stacks.py", "mocker_bench.py",
                 "mttr.py", "converge.py")


def _params():
    order = [n for n in LONGEST_FIRST if n in SMOKES] + sorted(set(SMOKES) - set(LONGEST_FIRST))
    return [pytest.param(name, marks=(pytest.mark.bench, *SMOKES[name].marks), id=name.removesuffix(".py"))
            for name in order]


@pytest.mark.parametrize("script", _params())
def test_benchmark_runs_at_its_smallest_size(script, tmp_path, summary):
    smoke = SMOKES[script]
    absent = [n for n in smoke.needs if not (ROOT / n).exists()]
    if absent or (smoke.root and os.geteuid() != 0):
        why = f"missing {absent} (scripts/stacks-install.sh)" if absent else "needs root"
        if STRICT:
            pytest.fail(f"RECONCILER_REQUIRE_SLURM=1 but {script} cannot run: {why}")
        pytest.skip(why)
    lo = next(harness._ranges)  # this test's own 100 ports, apart from every other test's
    # TMPDIR stays: aiperf's ZMQ sockets live under it, and a pytest tmp_path is past their path limit
    env = {**os.environ, "RECONCILER_PORT_RANGE": f"{lo}-{lo + 99}",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    r = subprocess.run([sys.executable, str(BENCH / script), "--smoke"], capture_output=True, text=True,
                       timeout=smoke.timeout, cwd=tmp_path, env=env)
    out = r.stdout + r.stderr
    assert r.returncode == 0, f"{script} --smoke exited {r.returncode}:\n{out[-4000:]}"
    header, row = table(r.stdout, smoke.header, smoke.numbers)
    summary(f"{script} --smoke:\n{header}\n{row}")
    # nothing of it is left listening in its ports: a gateway (nginx, a daemon that outlives the
    # reconciler) left behind held its port for good and broke later runs in the same range
    wait_until(lambda: not listening(lo, lo + 99), timeout=30, what=f"{script}'s ports free again "
               f"(listening when the wait began: {listening(lo, lo + 99)})")


def listening(lo: int, hi: int) -> list[str]:
    """``port program`` of every TCP listener on this host in [lo, hi] (``ss``)."""
    out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, timeout=10).stdout
    found = []
    for line in out.splitlines():
        cols = line.split()
        port = cols[3].rsplit(":", 1)[-1] if len(cols) > 3 else ""
        if port.isdigit() and lo <= int(port) <= hi:
            found.append(f"{port} {cols[5] if len(cols) > 5 else ''}")
    return found


@pytest.mark.bench
def test_health_farm_answers_as_engine_and_router():
    """tick.py's stand-in: 200 "ok" for an engine's /health, and the router's life probe answered
    with the life it names, which is what the reconciler's probe requires of a router."""
    from reconciler.shell.readiness.probe import probe_life, probe_one

    p = subprocess.Popen([sys.executable, str(BENCH / "health_farm.py")], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True, bufsize=1)
    try:
        port = next(harness._ranges)
        p.stdin.write(f"{port}\n")
        p.stdin.flush()
        assert p.stdout.readline().split() == ["ok", str(port)]
        assert get(f"http://127.0.0.1:{port}/health") == (200, b"ok")
        assert probe_one("127.0.0.1", port, "/health")
        assert probe_life("127.0.0.1", port, "/health?life=a", "a")
        assert probe_life("127.0.0.1", port, "/health?life=b", "b")
        assert not probe_life("127.0.0.1", port, "/health", "a")  # no life asked: not a router's answer
        from reconciler.shell.readiness.canary import canary

        assert canary("127.0.0.1", port, "m") is None  # a frontend's canary: listed, and one token
        assert "not listed" in (canary("127.0.0.1", port, "other") or "")
    finally:
        p.kill()
        p.wait()


def test_table_reads_a_header_and_a_row_with_numbers():
    out = "noise\n recipes units cpu/tick\n       2      6      3.4ms   0.564ms\n"
    assert table(out, r"recipes\s+units", 4)[1].split()[0] == "2"
    with pytest.raises(AssertionError, match="no row"):
        table(" recipes units\n- - - -\n", r"recipes\s+units", 2)
    with pytest.raises(AssertionError, match="no table header"):
        table("1 2 3 4\n", r"recipes", 2)


def test_mttr_times_and_tears_down_only_its_own_run():
    """mttr.py --smoke failed now and then in full runs: two runs at once on the shared Slurm (two
    people's test runs) deploy the same recipe names, and mttr.py picked steps by recipe alone, so
    one run timed — and scancelled — the other's agg_0, and its teardown cancelled and waited for
    every ``:mttr-`` job on the cluster. Both now go by this run's owner label."""
    sys.path.insert(0, str(BENCH))
    try:
        import mttr
    finally:
        sys.path.remove(str(BENCH))
    lines = ["10.0|rcl:sother:mttr-backoff:agg:0:0:abc", "11.0|rcl:smine:mttr-backoff:agg:0:0:abc",
             "11.1|rcl:smine:mttr-backoff:frontend:0:0:def", "12|rcl:smine:mttr-backoff:a0", "13|rcl:sother:mttr-kill9:a0"]
    assert mttr.steps_of(lines, "smine", "mttr-backoff") == {"agg_0": "11.0", "frontend_0": "11.1"}
    assert mttr.steps_of(lines[:1], "smine", "mttr-backoff") == {}
    assert mttr.jobs_of(lines, "smine") == ["11.0", "11.1", "12"]
