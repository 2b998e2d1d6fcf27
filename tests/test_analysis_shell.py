"""shell/gates/analysis_runs.py: the runs read back as facts, one real runner per recipe started from the plan's
asks, adopted across a restart (running.json), and stopped when no longer asked for."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from helpers import wait_until
from reconciler.core.plan.results import Measure, Plan, RecipePlan
from reconciler.drivers.state import StateDir
from reconciler.shell.gates.analysis_runs import Analyzer, read_runs, run_dir
from reconciler.world import Analysis, Desired, DesiredRecipe

PLAN = json.dumps({"type": "rollout-analysis", "isl": 8, "osl": 4, "max_error_rate": 0.0, "timeout": 60,
                   "levels": [{"concurrency": 1, "args": ["--concurrency", "1"]}]})


def _desired(name: str) -> Desired:
    return Desired({name: DesiredRecipe(name, "gen1", (), (), (), (), analysis=Analysis(PLAN, 500.0, 0.9))})


def test_runs_are_read_back_with_their_index_old_spec_and_generation(tmp_path):
    base = tmp_path / "r" / "analysis" / "agg" / "specnew" / "0"
    base.mkdir(parents=True)
    (base / "20261205T000000Z-a.json").write_text(json.dumps({"status": "Succeeded", "subject": "specold@gen1",
                                                              "ended": 5.0}))
    (base / "20261205T000001Z-a.json").write_text(json.dumps({"status": "Cancelled", "subject": "specold@gen1"}))
    (base / "runner.log").write_text("not a summary")
    (base / "notes.json").write_text("[1, 2]")
    (runs,) = read_runs(tmp_path, "r").values()
    assert list(read_runs(tmp_path, "r")) == [("r", "agg", "specnew")]
    (run,) = runs  # a Cancelled run is no verdict: the life is measured again
    assert (run["index"], run["against"], run["generation"], run["ended"]) == (0, "specold", "gen1", 5.0)
    # only the specs that run or are wanted are read each tick (every spec's runs are kept)
    assert read_runs(tmp_path, "r", {"specnew"}) and read_runs(tmp_path, "r", {"specother"}) == {}


@pytest.fixture
def silent_url():
    """An endpoint that takes connections and never answers (the kernel accepts them into the
    backlog): aiperf's requests wait there until the runner is stopped, so the run cannot end on
    its own before the test stops it (against a closed port aiperf failed at once, and the test
    passed only while that took longer than the next tick's SIGTERM)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(64)
        yield f"http://127.0.0.1:{s.getsockname()[1]}"


@pytest.mark.needs("aiperf")  # the runner is the real one: aiperf against the endpoint
def test_one_runner_per_recipe_adopted_by_a_new_process_and_stopped_when_not_asked_for(tmp_path, silent_url):
    state = StateDir(tmp_path)
    m = Measure("r", "agg", 0, "specnew", "specold", silent_url, "new", "gen1")
    asked = Plan({"r": RecipePlan("r", measure=(m,))})
    a = Analyzer(state, 0.0)
    a.tick(asked, _desired("r"))
    pidfile = tmp_path / "r" / "analysis" / "running.json"
    first = json.loads(pidfile.read_text())
    assert first["measure"]["url"] == m.url and Path(f"/proc/{first['pid']}").exists()
    # the same ask again, from this process or a restarted one: no second runner beside it
    Analyzer(state, 0.0).tick(asked, _desired("r"))
    assert json.loads(pidfile.read_text())["pid"] == first["pid"]
    # no longer asked for (the new life was judged dead, say): stopped, and its run recorded as Cancelled
    # (once it runs: its first line comes after its SIGTERM handler is set)
    out = run_dir(tmp_path, m)
    wait_until(lambda: f"against {silent_url}" in (out / "runner.log").read_text(), timeout=30,
               what="the runner started")
    a.tick(Plan({"r": RecipePlan("r")}), _desired("r"))
    summary = wait_until(lambda: [json.loads(p.read_text()) for p in out.glob("*.json")], timeout=30,
                         what="the stopped runner's summary")
    assert summary[0]["status"] == "Cancelled" and summary[0]["subject"] == "specold@gen1"
    wait_until(lambda: not Path(f"/proc/{first['pid']}/cmdline").exists()
               or b"benchrun" not in Path(f"/proc/{first['pid']}/cmdline").read_bytes(), timeout=30,
               what="the runner gone")
    a.tick(Plan({"r": RecipePlan("r")}), _desired("r"))
    assert not pidfile.exists()
    kinds = [json.loads(l)["kind"] for l in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert kinds.count("AnalysisStarted") == 1 and kinds.count("AnalysisStopped") == 1


def test_get_wait_stops_at_once_on_a_rollout_analysis_failure_of_the_current_file(tmp_path, capsys):
    from reconciler.cli.get_wait import wait

    (tmp_path / "r").mkdir()
    msg = "rollout analysis failed ...: agg_0: throughput ratio 0.54 < min_throughput_ratio 0.75; ..."
    (tmp_path / "r" / "status.json").write_text(json.dumps({
        "name": "r", "phase": "Degraded", "observedGeneration": "g2",
        "conditions": [{"type": "Progressing", "status": "False", "reason": "RolloutFailed", "message": msg}]}))
    assert wait(tmp_path, ["r"], {"r": "g2"}, timeout=20, poll=0.05) is False
    assert f"error: r: {msg}" in capsys.readouterr().err
    # a status of an earlier version of the file is not this one's failure: it waits (here: to its timeout)
    assert wait(tmp_path, ["r"], {"r": "g3"}, timeout=0.2, poll=0.05) is False
    assert "not Ready after" in capsys.readouterr().err
