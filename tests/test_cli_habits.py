"""CLI habits that need no cluster: the port range's warnings, crash reasons, `logs NAME`'s pick,
the recorded settings' comparisons."""

from __future__ import annotations

import pytest

from reconciler.cli import run_settings
from reconciler.shell import reasons
from reconciler.cli.context import ephemeral_range, port_range_warnings
from reconciler.errors import ReconcilerError
from reconciler.cli.logs_pick import pick


def test_port_range_warnings():
    eph = (32768, 60999)
    assert port_range_warnings(20000, 32000, eph) == []
    assert port_range_warnings(20000, 32768, eph) == []  # [20000, 32768): the last port is 32767
    (w,) = port_range_warnings(20000, 32769, (40000, 50000))
    assert "32767" in w and "ephemeral" not in w
    assert len(port_range_warnings(20000, 32769, eph)) == 2  # 32768: above Dynamo's and Linux's first
    ws = port_range_warnings(40000, 41000, eph)
    assert any("ephemeral port range 32768-60999" in w for w in ws) and any("32767" in w for w in ws)
    assert port_range_warnings(20000, 30000, None) == []


def test_ephemeral_range_read_from_proc(tmp_path):
    f = tmp_path / "r"
    f.write_text("32768\t60999\n")
    assert ephemeral_range(f) == (32768, 60999)
    assert ephemeral_range(tmp_path / "missing") is None


def test_exit_words():
    assert [reasons.exit_word(c) for c in (0, 1, 137, 143, 139, 134)] == [
        "Completed", "Error", "Killed", "Terminated", "Segfault", "Aborted"]


def _row(phase, code=None, restarts=1, steps=()):
    return {"name": "decode_0", "role": "decode", "phase": phase, "ready": phase == "Ready", "restarts": restarts,
            "steps": list(steps), "lastExit": {"code": code, "at": "2026-01-01T00:00:00Z"} if code is not None else None}


def test_unit_reason_words_and_the_first_fatal_line(tmp_path):
    logs = tmp_path / "r" / "logs"
    logs.mkdir(parents=True)
    (logs / "decode_0.0.log").write_text("starting\nINFO ok\nTraceback (most recent call last):\n"
                                         "ValueError: port 40000 out of range for i16\nlater error\n")
    got = reasons.unit_reason(_row("BackOff", 1), {}, tmp_path, "r", ())
    assert got[0] == "CrashLoopBackOff" and "exited 1" in got[1]
    assert "log: ValueError: port 40000 out of range for i16" in got[1]
    # the unit's own pattern wins over the generic words
    got = reasons.unit_reason(_row("BackOff", 1), {}, tmp_path, "r", (r"later",))
    assert got[1].endswith("log: later error")
    assert reasons.unit_reason(_row("Failed", 137), {}, tmp_path, "r", ())[0] == "Killed"
    assert reasons.unit_reason(_row("Starting", None), {"lastStoppedFor": "fatal log line"}, tmp_path, "r",
                               ())[0] == "FatalLogLine"
    assert reasons.unit_reason(_row("Ready", 1), {}, tmp_path, "r", ()) is None  # serving again
    assert reasons.unit_reason(_row("Pending", None, restarts=0), {}, tmp_path, "r", ()) is None  # never failed
    rows = [dict(_row("Ready"), reason=None), dict(_row("BackOff", 1), name="decode_1", reason="CrashLoopBackOff",
                                                   message="exited 1")]
    assert reasons.recipe_reason(rows) == ("CrashLoopBackOff", "decode_1: exited 1")


def test_a_relaunch_not_yet_in_squeue_does_not_hide_the_failed_lifes_log(tmp_path):
    """The moment after a relaunch: the failed life's log is rotated to .1 and the new life's log is
    fresh (squeue does not list its step yet). The reason still quotes the failed life."""
    import os
    import time

    logs = tmp_path / "r" / "logs"
    logs.mkdir(parents=True)
    (logs / "decode_0.0.log.1").write_text("error: unrecognized arguments: --bogus\n")
    (logs / "decode_0.0.exit").write_text("2 1767225600\n")
    exited = time.time() - 5
    os.utime(logs / "decode_0.0.log.1", (exited - 1, exited - 1))
    os.utime(logs / "decode_0.0.exit", (exited, exited))
    (logs / "decode_0.0.log").write_text("")  # the new life's, created by the relaunch
    row = _row("Pending", 2)
    got = reasons.unit_reason(row, {"lastLaunch": exited + 1}, tmp_path, "r", ())
    assert "log: error: unrecognized arguments: --bogus" in got[1], got
    # no launch since the exit: the newest log is the failed life's own
    (logs / "decode_0.0.log").write_text("error: the newest life's own words\n")
    got = reasons.unit_reason(row, {"lastLaunch": exited - 3}, tmp_path, "r", ())
    assert "log: error: the newest life's own words" in got[1], got


def test_a_relaunch_whose_log_srun_has_not_opened_yet_still_quotes_the_failed_life(tmp_path):
    """Right after a relaunch in the same slot, the failed life's log is .1 and the new life's log
    does not exist yet (slurmstepd opens it a moment later): choosing "all logs but the newest" found
    none (CI saw 'exited 2' without its log line)."""
    import os
    import time

    logs = tmp_path / "r" / "logs"
    logs.mkdir(parents=True)
    (logs / "agg_0.0.log.1").write_text("error: unrecognized arguments: --bogus\n")
    (logs / "agg_0.0.exit").write_text("2 1767225600\n")
    exited = time.time() - 5
    os.utime(logs / "agg_0.0.exit", (exited, exited))
    row = dict(_row("Starting", 2, steps=("7.1",)), name="agg_0", role="agg")
    got = reasons.unit_reason(row, {"lastLaunch": exited + 1, "slot": 0}, tmp_path, "r", ())
    assert "log: error: unrecognized arguments: --bogus" in got[1], got
    # not yet in squeue either
    got = reasons.unit_reason(dict(row, steps=[]), {"lastLaunch": exited + 1, "slot": 0}, tmp_path, "r", ())
    assert "log: error: unrecognized arguments: --bogus" in got[1], got
    # the new life is a surge life in the other slot: the failed life's log was not moved
    (logs / "agg_0.0.log.1").rename(logs / "agg_0.0.log")
    (logs / "agg_0@b.0.log").write_text("INFO starting\n")
    got = reasons.unit_reason(row, {"lastLaunch": exited + 1, "slot": 1}, tmp_path, "r", ())
    assert "log: error: unrecognized arguments: --bogus" in got[1], got


def test_logs_pick(tmp_path):
    logs = tmp_path / "r" / "logs"
    logs.mkdir(parents=True)
    (logs / "agg_0.0.log").write_text("")
    assert pick(tmp_path, "r", None, None) == ("agg", 0)  # the only worker
    assert pick(tmp_path, "r", "decode", 2) == ("decode", 2)
    (logs / "agg_1.0.log").write_text("")
    with pytest.raises(ReconcilerError, match="-r ROLE -i N"):
        pick(tmp_path, "r", None, None)
    (logs / "frontend_0.0.log").write_text("")
    assert pick(tmp_path, "r", None, None) == ("frontend", 0)


def test_recorded_settings_round_trip_and_comparison(tmp_path):
    run_settings.write(tmp_path, {"instance": "a", "portRange": "1-2", "manifests": str(tmp_path / "m")})
    rec = run_settings.read(tmp_path)
    assert rec["instance"] == "a" and rec["pid"] > 0 and not run_settings.run_alive(tmp_path)
    assert run_settings.same("manifests", str(tmp_path / "x" / ".." / "m"), rec["manifests"])
    assert not run_settings.same("portRange", "1-3", rec["portRange"])
    (tmp_path / "run.json").write_text("{not json")
    assert run_settings.read(tmp_path) is None


def test_the_repo_ships_no_manifests_and_the_dev_cluster_config_runs_srtctls_examples(tmp_path, corpus):
    import subprocess
    import sys

    from conftest import ROOT

    # the first `run` in a fresh clone deploys exactly what the user dropped into manifests/
    assert not list((ROOT / "manifests").glob("*.y*ml")) if (ROOT / "manifests").is_dir() else True
    cfg = tmp_path / "srtslurm.yaml"
    cfg.write_text((ROOT / "examples" / "srtslurm.yaml.in").read_text().replace("@ROOT@", str(ROOT)))
    r = subprocess.run([sys.executable, "-m", "reconciler.cli", "--cluster-config", str(cfg), "validate",
                        str(corpus / "srt-slurm-v2" / "mocker")], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0 and "2 valid, 0 invalid" in r.stderr, r.stdout + r.stderr
    assert "host runtime from the cluster config" in subprocess.run(
        [sys.executable, "-m", "reconciler.cli", "--cluster-config", str(cfg), "validate", "-v",
         str(corpus / "srt-slurm-v2" / "mocker" / "dynamo-agg.yaml")], capture_output=True, text=True).stdout
