"""Read commands answer from what `run` recorded, without the controller (issue 46 item 8): while a
`run` holds the state directory, `get`, `events`, `logs` and `benchmarks` import neither the loop,
the desired-state build, structlog nor pydantic (~1 s of imports that made each call 1.1-1.5 s);
`get` reads state/<recipe>/status.json. benchmarks/read_commands.py times them."""

from __future__ import annotations

import fcntl
import importlib.util
import json
import subprocess
import time
import sys

import pytest

from conftest import ROOT

HEAVY = ("reconciler.shell.loop", "reconciler.desired.build", "reconciler.drivers.state", "structlog", "pydantic")
# runs the CLI as `python -m reconciler.cli ARGS` does, then says which heavy modules it imported
PROBE = ("import json, runpy, sys; sys.argv = ['reconciler'] + sys.argv[1:]; code = 0\n"
         "try:\n    runpy.run_module('reconciler.cli', run_name='__main__')\n"
         "except SystemExit as e:\n    code = e.code\n"
         f"print('LOADED', json.dumps([m for m in {HEAVY!r} if m in sys.modules]), file=sys.stderr)\n"
         "sys.exit(code)")


def _bench():
    spec = importlib.util.spec_from_file_location("read_commands", ROOT / "benchmarks" / "read_commands.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def state(tmp_path):
    """The benchmark's state directory of 3 deployments, its lock held as a running `run` holds it."""
    root = tmp_path / "state"
    _bench().build_state(root, 3)
    with open(root / "run.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        yield root


def probe(state, *argv: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    r = subprocess.run([sys.executable, "-c", PROBE, *argv, "--state", str(state)], capture_output=True, text=True,
                       cwd=state.parent, timeout=60)
    line = next(x for x in r.stderr.splitlines() if x.startswith("LOADED "))
    return r, json.loads(line.split(" ", 1)[1])


@pytest.mark.parametrize("argv", [("get",), ("get", "-o", "wide"), ("get", "-o", "json", "dep-001"), ("events",),
                                  ("events", "dep-001"), ("logs", "dep-001"), ("logs", "dep-001", "--tail", "3"),
                                  ("benchmarks", "dep-001"), ("describe", "dep-001"),
                                  ("describe", "dep-001", "-o", "json")], ids=" ".join)
def test_read_commands_import_no_controller(state, argv):
    r, loaded = probe(state, *argv)
    assert "error" not in r.stderr, r.stderr
    assert loaded == [], f"{' '.join(argv)} imported {loaded}"
    assert r.stdout.strip()


def test_get_rows_are_runs_record(state):
    r, _ = probe(state, "get", "-o", "json")
    rows = json.loads(r.stdout)
    assert [x["name"] for x in rows] == ["dep-000", "dep-001", "dep-002"]
    st = json.loads((state / "dep-001" / "status.json").read_text())
    one = rows[1]
    assert (one["status"], one["endpoint"], one["servedModel"], one["restarts"]) == (
        "Ready", st["endpoint"], "Qwen/Qwen3-0.6B", 1)
    assert one["roles"] == {"agg": st["roles"]["agg"]} and one["conditions"] == st["conditions"]
    assert one["replicas"] == st["replicas"]  # get's UP-TO-DATE and AVAILABLE, as run recorded them
    assert one["benchmark"]["status"] == "passed" and one["age_seconds"] >= 3599
    # an invalid file keeps its last spec running: the row says Invalid with the file's error
    next(c for c in st["conditions"] if c["type"] == "Invalid").update(
        status="True", message="m.yaml:3: roles.agg.workers: not a number")
    (state / "dep-001" / "status.json").write_text(json.dumps(st))
    r, _ = probe(state, "get", "dep-001", "-o", "wide")
    assert "Invalid" in r.stdout and "InvalidSpec" in r.stdout and "Qwen/Qwen3-0.6B" in r.stdout, r.stdout
    assert "roles.agg.workers: not a number" in r.stderr
    # its file gone, the workloads still there: said, not shown as if nothing happened
    files = json.loads((state / "files.json").read_text())
    (state / "files.json").write_text(json.dumps({k: v for k, v in files.items() if v != ["dep-002"]}))
    r, _ = probe(state, "get", "dep-002", "-o", "json")
    (gone,) = json.loads(r.stdout)
    assert gone["status"] == "ManifestMissing" and "prune guard" in gone["error"] and gone["endpoint"], gone
    r, _ = probe(state, "get", "nope")
    assert r.returncode == 1 and "no recipe named nope" in r.stderr


def test_describe_answers_from_runs_record_at_its_own_now(state):
    """describe reads status.json and detail.json (shell/describe_facts.py writes it after each
    pass): an allocation's time left counts down from the recorded end, a pending one is explained
    with its wait so far, a held-back unit shows its next retry, a quarantined node its reason."""
    now = time.time()
    st = json.loads((state / "dep-001" / "status.json").read_text())
    unit = st["workers"][0]["name"]
    (state / "dep-001" / "detail.json").write_text(json.dumps({
        "error": None, "suspended": False, "benchmarkState": None,
        "units": {unit: {"nextRetry": "2026-12-07T10:00:00Z", "waiting": None}},
        "allocations": [
            {"job": "71", "index": 0, "state": "RUNNING", "reason": "None", "nodes": ["n1"], "timeLimit": "2:00:00",
             "timeLeft": None, "endsAt": now + 3725, "endsBy": "2026-12-07T11:00:00Z", "endsWhy": "a maintenance"},
            {"job": "72", "index": 1, "state": "PENDING", "reason": "Priority", "nodes": [], "timeLimit": "2:00:00",
             "timeLeft": None, "endsAt": None, "pending": {"reason": "Priority", "start": None, "submitted": now - 300}}]}))
    (state / "quarantine.json").write_text(json.dumps({"quarantined": {
        "n9": {"since": now - 10, "until": now + 600, "untilIso": "2026-12-07T11:11:11Z", "why": "3 failures"},
        "n8": {"since": now - 900, "until": now - 5, "untilIso": "2026-12-07T09:00:00Z", "why": "over"}}}))
    r, loaded = probe(state, "describe", "dep-001")
    assert r.returncode == 0 and loaded == [], (r.stderr, loaded)
    assert "Endpoint: " + st["endpoint"] in r.stdout and "Model: Qwen/Qwen3-0.6B" in r.stdout, r.stdout
    line = next(x for x in r.stdout.splitlines() if "job 71" in x)
    left = line.split("time left ")[1].split(" of ")[0]
    assert left in ("1:02:05", "1:02:04", "1:02:03") and line.endswith("of 2:00:00 granted"), line
    assert "must end by 2026-12-07T11:00:00Z: a maintenance" in r.stdout
    assert "allocation 1 (job 72) pending 5m" in r.stdout and "jobs with a higher priority" in r.stdout, r.stdout
    assert "2026-12-07T10:00:00Z" in next(x for x in r.stdout.splitlines() if x.strip().startswith(unit + " "))
    assert "node n9 quarantined until 2026-12-07T11:11:11Z: 3 failures" in r.stdout and "n8" not in r.stdout
    r, _ = probe(state, "describe", "dep-001", "-o", "json")
    doc = json.loads(r.stdout)
    assert [a["job"] for a in doc["allocations"]] == ["71", "72"] and doc["allocations"][1]["pendingSeconds"] >= 300
    assert doc["units"][0]["nextRetry"] == "2026-12-07T10:00:00Z" and doc["recordedAt"] == st["updatedAt"]
    # a name run has not recorded goes the controller's way, which says what it knows
    r, loaded = probe(state, "describe", "nope", "--driver", "local", "--manifests", str(state.parent / "m"))
    assert r.returncode == 1 and "no recipe named nope" in r.stderr, r.stderr


def test_without_a_running_run_get_looks_at_the_cluster(tmp_path):
    """Nothing records when no `run` holds the state: `get` builds a snapshot itself, as before."""
    root = tmp_path / "state"
    _bench().build_state(root, 1)
    r, loaded = probe(root, "get", "--driver", "local", "--manifests", str(tmp_path / "m"))
    assert r.returncode == 0, r.stderr
    assert "reconciler.shell.loop" in loaded


def test_get_watch_prints_a_row_again_when_runs_record_changes(state):
    """`get -w` while `run` runs: the table, then a row whenever status.json changes (no controller)."""
    import queue
    import threading
    import time

    p = subprocess.Popen([sys.executable, "-m", "reconciler.cli", "get", "-w", "--interval", "0.2", "--state", str(state)],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=state.parent)
    # lines from a reader thread: a select() on the pipe says nothing of the lines readline() has
    # already buffered (the header and the rows written at once were read together, and the wait
    # for the second line then timed out with it in the buffer: the suite of 2026-12-07 17:00)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in p.stdout], daemon=True).start()
    try:
        def line(timeout: float) -> str:
            try:
                return lines.get(timeout=max(timeout, 0))
            except queue.Empty:
                raise AssertionError("get -w printed nothing in time") from None

        assert line(60).startswith("NAME")
        table = [line(10) for _ in range(4)]  # three rows and the controller line
        assert any(r.startswith("dep-001") and "Ready" in r for r in table), table
        st = json.loads((state / "dep-001" / "status.json").read_text())
        (state / "dep-001" / "status.json").write_text(json.dumps({**st, "phase": "Degraded"}))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            got = line(deadline - time.monotonic())
            if got.startswith("dep-001"):
                assert "Degraded" in got, got
                break
        else:
            raise AssertionError("no row printed again after the change")
    finally:
        p.terminate()
        p.wait(timeout=10)
