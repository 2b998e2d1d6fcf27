from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

import load
from programs import require_program, strict

ROOT = Path(__file__).resolve().parents[1]
CORPUS = Path(os.environ.get("RECONCILER_CORPUS", ROOT.parent / "shared" / "corpus"))


def slurm_available() -> tuple[bool, str]:
    if not shutil.which("sbatch") or not shutil.which("scontrol"):
        return False, "sbatch/scontrol not on PATH"
    try:
        out = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, f"scontrol ping failed: {e}"
    if "is UP" not in out.stdout:
        return False, f"slurmctld not answering: {out.stdout.strip() or out.stderr.strip()}"
    return True, ""


# the K-node cluster of scripts/slurm-multinode.sh: its own slurm.conf, reached through SLURM_CONF
MULTINODE_CONF = Path(os.environ.get("RECONCILER_MULTINODE_CONF", "/tmp/slurm-mn/slurm.conf"))
MULTINODE_NODES = 3


def multinode_available() -> tuple[bool, str]:
    if not MULTINODE_CONF.is_file():
        return False, f"{MULTINODE_CONF} not found"
    if not shutil.which("sinfo"):
        return False, "sinfo not on PATH"
    env = {**os.environ, "SLURM_CONF": str(MULTINODE_CONF)}
    try:
        out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %T"], capture_output=True, text=True, timeout=10, env=env)
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, f"sinfo failed: {e}"
    nodes = dict(line.split() for line in out.stdout.splitlines() if len(line.split()) == 2)
    if out.returncode != 0 or len(nodes) < MULTINODE_NODES:
        return False, f"want {MULTINODE_NODES} nodes, sinfo says: {out.stdout.strip() or out.stderr.strip()}"
    return True, ""


def _gate(items, marker: str, check, what: str, hint: str, fixture: str) -> None:
    marked = [i for i in items if i.get_closest_marker(marker)]
    if not marked:
        return
    for item in marked:  # the summary counts these (keywords would also match a directory named so)
        item.user_properties.append(("real_slurm", marker))
    ok, why = check()
    if ok:
        return
    if os.environ.get("RECONCILER_REQUIRE_SLURM") == "1":
        for item in marked:
            item.add_marker(pytest.mark.usefixtures(fixture))
    else:
        skip = pytest.mark.skip(reason=f"no {what} ({why}); {hint}")
        for item in marked:
            item.add_marker(skip)


# The modules holding the longest tests (`pytest --durations`, 2026-12-06), longest first. Run first
# and handed out a test or two at a time (below: xdist keeps two pending per worker), they start
# on four workers at once instead of one of them meeting a 100-second test at the end of the run
# while the other three stand idle (867 s -> 748 s for the whole suite on the 2-core machine).
# The real vLLM's cold starts are the heaviest CPU load of the run: the e2e module (its longest
# chain: three cold starts in a row) starts first, the router module and the argv parse a few
# slow modules later, so that four vLLMs never start at once on the two cores.
SLOW_FIRST = ("test_vllm_real_e2e", "test_analysis_e2e", "test_chaos", "test_handover_e2e", "test_vllm_real_router_e2e",
              "test_slurm_time_e2e", "test_vllm_real_autoscale_e2e", "test_vllm_argv", "test_slow_start_e2e", "test_sglang_argv",
              "test_multinode_slurm_time", "test_autoscale_queue_e2e", "test_bench_e2e", "test_benchmarks",
              "test_multinode_nodes", "test_autoscale_disagg_e2e", "test_autoscale_e2e", "test_stacks",
              "test_benchrun", "test_gateway_job_e2e", "test_stack_handover_e2e", "test_e2e")


def pytest_configure(config):
    load.factor()  # measured here, before xdist starts its workers: they inherit it ($RECONCILER_LOAD_FACTOR)
    # (xdist's own load scheduling would send each worker a block of consecutive tests at the start;
    # pytest_xdist_make_scheduler below hands them out one unit at a time instead)


# Modules whose tests share one costly deployment (a module-scoped fixture: the real vLLM, a cold
# start of minutes): xdist must run each on one worker, or every worker that gets one of its tests
# starts the deployment again. (xdist's own loadgroup does not group here: pytest 9 no longer reads
# the suffixed nodeid it relies on.)
SHARED_DEPLOYMENT = ("test_vllm_real_e2e", "test_vllm_real_router_e2e", "test_vllm_real_autoscale_e2e",
                     "test_sglang_argv")  # no deployment: its module-scoped parse of the corpus (a minute)
# Everything that starts the real vLLM runs on one worker, one after the other: each cold start
# takes a core for minutes, and four at once (two modules, the argv parse, the benchmark's smoke)
# starved each other past their bounds (suite of 2026-12-07: a surge life not Ready in 14 min).
REAL_VLLM = ("test_vllm_real_e2e.py", "test_vllm_real_router_e2e.py", "test_vllm_real_autoscale_e2e.py", "test_vllm_argv.py",
             "test_benchmarks.py::test_benchmark_runs_at_its_smallest_size[real_engine]")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """Load scheduling by units (``-n N``, xdist's default ``--dist load`` only): each
    SHARED_DEPLOYMENT module one unit, every other test its own; a worker is handed the next unit
    while it has two or fewer tests pending, the largest units first, then the rest in the
    collection's order (SLOW_FIRST). Any other ``--dist`` is xdist's own."""
    if config.getvalue("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    config.option.loadscopereorder = False  # the collection's order (SLOW_FIRST), not the largest unit first

    class SharedModules(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            if any(nodeid.startswith(f"tests/{p}") for p in REAL_VLLM):
                return "real-vllm"
            module = nodeid.split("::", 1)[0]
            return module if Path(module).stem in SHARED_DEPLOYMENT else nodeid

    return SharedModules(config, log)


def _slow_rank(item) -> int:
    name = item.path.stem
    return SLOW_FIRST.index(name) if name in SLOW_FIRST else len(SLOW_FIRST)


def pytest_collection_modifyitems(config, items):
    items.sort(key=_slow_rank)  # stable: each module's own order (and its fixtures' scope) is kept
    _gate(items, "slurm", slurm_available, "Slurm", "start one with scripts/slurm-dev.sh up", "_slurm_required_but_missing")
    _gate(items, "multinode", multinode_available, f"{MULTINODE_NODES}-node Slurm", "start it with scripts/slurm-multinode.sh up --nodes 3",
          "_multinode_required_but_missing")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    # before the test's fixtures start anything: a missing program is a skip, or a failure in strict mode
    for mark in item.iter_markers("needs"):
        for name in mark.args:
            require_program(name)


def pytest_sessionfinish(session, exitstatus):
    """A skip in strict mode fails the run: every program and cluster a test needs is installed by
    .ci/run, so a skip there hides a broken install. The count goes to $RECONCILER_SKIPS_FILE
    (.ci/run prints it). Under xdist this runs on the controller with every worker's reports."""
    if hasattr(session.config, "workerinput"):
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = len(reporter.stats.get("skipped", [])) if reporter else 0
    if os.environ.get("RECONCILER_SKIPS_FILE"):
        Path(os.environ["RECONCILER_SKIPS_FILE"]).write_text(f"{skipped}\n")
    if strict() and skipped and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture
def _slurm_required_but_missing():
    ok, why = slurm_available()
    pytest.fail(f"RECONCILER_REQUIRE_SLURM=1 but Slurm is unavailable: {why}")


@pytest.fixture
def _multinode_required_but_missing():
    ok, why = multinode_available()
    pytest.fail(f"RECONCILER_REQUIRE_SLURM=1 but the {MULTINODE_NODES}-node Slurm is unavailable: {why}")


def pytest_terminal_summary(terminalreporter):
    counts: dict[str, int] = {}
    for outcome in ("passed", "failed", "skipped", "error"):
        for rep in terminalreporter.stats.get(outcome, []):
            on_slurm = any(k == "real_slurm" for k, _ in getattr(rep, "user_properties", ()))
            if getattr(rep, "when", "call") in ("call", "setup") and on_slurm:
                if outcome == "passed" and rep.when != "call":
                    continue
                counts[outcome] = counts.get(outcome, 0) + 1
    terminalreporter.write_line(f"load factor {load.factor():.2f} (tests/load.py: the waits for what a test "
                                "caused were stretched by it)")
    skipped = len(terminalreporter.stats.get("skipped", []))
    if strict() and skipped:
        terminalreporter.write_sep("!", f"{skipped} skipped under RECONCILER_REQUIRE_SLURM=1: the run fails")
    if counts:
        terminalreporter.write_sep("-", "tests on the real Slurm")
        terminalreporter.write_line(", ".join(f"{n} {k}" for k, n in counts.items()))
    # figures a test reported through the `summary` fixture; user_properties travel from xdist workers
    for outcome in ("passed", "failed"):
        for rep in terminalreporter.stats.get(outcome, []):
            for key, text in getattr(rep, "user_properties", ()):
                if key == "summary" and rep.when == "call":
                    terminalreporter.write_sep("-", "summary")
                    terminalreporter.write_line(text)


@pytest.fixture
def summary(request):
    """summary(text): print ``text`` in the run's terminal summary (also under pytest-xdist)."""
    return lambda text: request.node.user_properties.append(("summary", text))


@pytest.fixture(scope="session")  # a path: module-scoped fixtures read it too
def corpus() -> Path:
    source = "RECONCILER_CORPUS" if os.environ.get("RECONCILER_CORPUS") else "../shared/corpus beside the checkout"
    if not CORPUS.is_dir():
        msg = f"corpus not found at {CORPUS} (from {source}; set RECONCILER_CORPUS to its directory)"
        if os.environ.get("CI") or os.environ.get("RECONCILER_REQUIRE_SLURM"):
            pytest.fail(msg)
        pytest.skip(msg)
    return CORPUS


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


@pytest.fixture
def nic():
    """(interface, IPv4 address) of a non-loopback interface on this host, for the
    network_interface tests. As root (CI) the test makes its own: a veth pair named for this
    process, the address 198.51.100.x/32 (TEST-NET-2, documentation only: nothing is sent to it),
    removed afterwards; so the address is known and does not depend on the machine's network.
    Otherwise an existing interface; none: a skip, or a failure under RECONCILER_REQUIRE_SLURM=1."""
    name = f"rclt{os.getpid() % 100000}"
    ip = f"198.51.100.{os.getpid() % 250 + 1}"
    made = os.geteuid() == 0 and shutil.which("ip") is not None and subprocess.run(
        ["ip", "link", "add", name, "type", "veth", "peer", "name", name + "p"], capture_output=True).returncode == 0
    try:
        if made:
            for argv in (["ip", "addr", "add", f"{ip}/32", "dev", name], ["ip", "link", "set", name, "up"]):
                r = subprocess.run(argv, capture_output=True, text=True)
                assert r.returncode == 0, f"{' '.join(argv)}: {r.stderr}"
            yield name, ip
            return
        out = subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True).stdout
        found = next(((f[1], f[3].split("/")[0]) for f in map(str.split, out.splitlines()) if f[1] != "lo"), None)
        if found is None:
            msg = "no non-loopback IPv4 interface on this machine, and not root to make one"
            if os.environ.get("RECONCILER_REQUIRE_SLURM") == "1":
                pytest.fail(f"RECONCILER_REQUIRE_SLURM=1 but {msg}")
            pytest.skip(msg)
        yield found
    finally:
        if made:
            subprocess.run(["ip", "link", "del", name], capture_output=True)


@pytest.fixture(autouse=True)
def _the_tests_gateways_quit(request):
    """A test's gateways (nginx, holder) quit when it ends, not at the session's end: one left
    running keeps its port, and this worker's port ranges come round again a few dozen tests later
    (a later test's holder then met the old one on its port)."""
    tmp = request.getfixturevalue("tmp_path") if "tmp_path" in request.fixturenames else None
    yield
    if tmp is not None:
        from reconciler.shell.gateway.sweep import quit_under

        quit_under(tmp)


@pytest.fixture(autouse=True, scope="session")
def _no_gateway_left_behind(tmp_path_factory):
    """A test that runs a controller and leaves its recipes (no cleanup run) leaves the deployment's
    gateway, an nginx daemon, running: at the end of the session every nginx master whose prefix is
    under this session's temporary directory is told to quit (SIGQUIT), found by its process."""
    yield
    from reconciler.shell.gateway.sweep import quit_under

    quit_under(tmp_path_factory.getbasetemp())  # by the processes: a wiped state dir has no pid file
