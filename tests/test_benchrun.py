"""The benchmark step: verdicts on hand-built figures, and real aiperf runs against the mocker
(a good one Succeeded; 0 output tokens and short answers Failed with the reason)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import start_mocker
from reconciler.benchrun.__main__ import aiperf_env
from reconciler.benchrun.summary import FAILED, SUCCEEDED, records_summary, summarize, verdict
from reconciler.desired.bench_map import bench_plan
from reconciler.mocker.model_dir import make_model_dir
from reconciler.recipe.carried import BenchmarkConfig

ROOT = Path(__file__).resolve().parents[1]
AIPERF = ROOT / ".stacks" / "aiperf" / "bin" / "aiperf"


def lv(**kw):
    return {"concurrency": 4, "requests": 40, "errors": 0, "output_tokens": 1280, "osl_min": 32.0, **kw}


@pytest.mark.parametrize("levels, status, reason", [
    ([lv()], SUCCEEDED, ""),
    ([lv(output_tokens=0)], FAILED, "at concurrency 4: 0 output tokens in 40 requests"),
    ([lv(errors=1)], FAILED, "1 of 40 requests failed (2.5% > max_error_rate 0%)"),
    ([lv(osl_min=31.0)], FAILED, "output shorter than requested (a request got 31 tokens, osl 32)"),
    ([lv(), lv(concurrency=8, failed="aiperf exited 1: boom")], FAILED, "at concurrency 8: aiperf exited 1: boom"),
    ([], FAILED, "no level ran"),
])
def test_verdicts(levels, status, reason):
    got = verdict(levels, osl=32, max_error_rate=0.0)
    assert got[0] == status and reason in got[1]


@pytest.mark.parametrize("base, left, window", [
    ({}, 600.0, "600"),  # the benchmark's time left
    ({}, 4.2, "30"),  # never below aiperf's own 30 s
    ({}, 1e9, "100000"),  # nor above what aiperf accepts
    ({"AIPERF_SERVICE_REGISTRATION_TIMEOUT": "45", "AIPERF_SERVICE_REGISTRATION_MAX_ATTEMPTS": "45"}, 600.0, "45"),
])
def test_aiperfs_registration_window_is_the_benchmarks_time_left(base, left, window):
    env = aiperf_env({"HF_HUB_OFFLINE": "1", "PATH": "/bin", **base}, "/tmp/b", left)
    assert env["AIPERF_SERVICE_REGISTRATION_TIMEOUT"] == env["AIPERF_SERVICE_REGISTRATION_MAX_ATTEMPTS"] == window
    assert env["TMPDIR"] == "/tmp/b" and env["PATH"] == "/bin" and "HF_HUB_OFFLINE" not in env


def test_error_threshold_is_the_policys():
    assert verdict([lv(errors=2)], 32, 0.05)[0] == SUCCEEDED  # 5% allowed
    assert verdict([lv(errors=3)], 32, 0.05)[0] == FAILED


def test_headline_is_the_last_level_and_totals_add_up():
    s = summarize([lv(req_s=1.0, output_tokens=10), lv(concurrency=8, req_s=2.0, output_tokens=20, errors=0)],
                  {"run": "x"}, 32, 0.0)
    assert s["req_s"] == 2.0 and s["output_tokens"] == 30 and s["run"] == "x" and s["status"] == SUCCEEDED


def test_records_only_count_the_profiling_phase():
    rec = lambda phase, tokens=0, error=None: json.dumps(  # noqa: E731
        {"metadata": {"benchmark_phase": phase}, "metrics": {"output_token_count": {"value": tokens}},
         **({"error": {"type": "E", "message": error}} if error else {})})
    got = records_summary([rec("warmup", 5), rec("profiling", error="empty"), rec("profiling", error="empty"),
                           "not json"], 2)
    assert got["requests"] == 2 and got["errors"] == 2 and got["output_tokens"] == 0 and got["error"] == "empty"
    assert records_summary([rec("warmup")], 2) is None


def _run(url: str, out: Path, osl: int = 16) -> tuple[int, dict]:
    p = bench_plan(BenchmarkConfig(type="sa-bench", isl=32, osl=osl, concurrencies="2x4", num_prompts_mult=4,
                                   num_warmup_mult=0))
    tok = str(make_model_dir(out / "tok"))
    plan = {"type": p.type, "isl": p.isl, "osl": p.osl, "max_error_rate": 0.0, "timeout": 240,
            "levels": [{"concurrency": l.concurrency, "args": p.aiperf_args(l, "m", tok)} for l in p.levels]}
    r = subprocess.run([sys.executable, "-m", "reconciler.benchrun", "--aiperf", str(AIPERF), "--url", url,
                        "--out", str(out / "benchmarks"), "--subject", "feedbeef00", "--plan", json.dumps(plan)],
                       capture_output=True, text=True, timeout=300)
    files = list((out / "benchmarks").glob("*.json"))
    assert len(files) == 1, r.stdout + r.stderr
    return r.returncode, json.loads(files[0].read_text())


needs_aiperf = pytest.mark.needs("aiperf")


@needs_aiperf
@pytest.mark.parametrize("fault, code, status, reason", [
    ((), 0, SUCCEEDED, ""),
    (("--emit-tokens", "0"), 3, FAILED, "0 output tokens in 8 requests"),
    (("--emit-tokens", "5"), 3, FAILED, "output shorter than requested (a request got 5 tokens, osl 16)"),
], ids=["good", "zero-tokens", "short"])
def test_aiperf_against_the_mocker(tmp_path, fault, code, status, reason):
    proc, url = start_mocker(tmp_path, "--speedup-ratio", "100", "--model-path", str(make_model_dir(tmp_path / "tok")),
                             *fault)
    try:
        got_code, s = _run(url, tmp_path)
    finally:
        proc.stop()
    assert (got_code, s["status"]) == (code, status) and reason in s["reason"], s
    assert s["subject"] == "feedbeef00" and Path(s["artifacts"]).is_dir()
    if status == SUCCEEDED:
        assert [lv["concurrency"] for lv in s["levels"]] == [2, 4]
        assert s["output_tokens"] == (8 + 16) * 16 and s["errors"] == 0 and s["req_s"] > 0 and s["ttft_p99_ms"] > 0
        assert list(Path(s["artifacts"]).rglob("profile_export_aiperf.json"))  # raw artifacts kept beside
    else:  # the first level failed it: the next one is not run
        assert [lv["concurrency"] for lv in s["levels"]] == [2]


def test_a_missing_aiperf_is_a_failed_run_with_the_reason(tmp_path):
    plan = {"type": "sa-bench", "isl": 8, "osl": 8, "max_error_rate": 0.0, "timeout": 30,
            "levels": [{"concurrency": 1, "args": ["--model", "m"]}]}
    r = subprocess.run([sys.executable, "-m", "reconciler.benchrun", "--aiperf", str(tmp_path / "no-aiperf"), "--url",
                        "http://127.0.0.1:9", "--out", str(tmp_path / "b"), "--subject", "s", "--plan", json.dumps(plan)],
                       capture_output=True, text=True, timeout=60)
    (f,) = (tmp_path / "b").glob("*.json")
    s = json.loads(f.read_text())
    assert r.returncode == 3 and s["status"] == FAILED and "cannot start aiperf" in s["reason"], s


def test_the_last_run_as_prometheus_gauges_and_a_deleted_recipes_go():
    from prometheus_client import generate_latest

    from reconciler.shell.metrics import Metrics

    m = Metrics()
    m.benchmarks({"r": {"status": SUCCEEDED, "req_s": 4.0, "ttft_p99_ms": 250.0, "output_tokens": 512, "errors": 0},
                  "q": {"status": FAILED, "output_tokens": 0}})
    text = generate_latest(m.registry).decode()
    assert 'reconciler_benchmark_requests_per_second{recipe="r"} 4.0' in text
    assert 'reconciler_benchmark_ttft_p99_seconds{recipe="r"} 0.25' in text
    assert 'reconciler_benchmark_succeeded{recipe="r"} 1.0' in text
    assert 'reconciler_benchmark_succeeded{recipe="q"} 0.0' in text
    m.benchmarks({"r": {"status": FAILED}})
    text = generate_latest(m.registry).decode()
    assert 'recipe="q"' not in text and 'reconciler_benchmark_succeeded{recipe="r"} 0.0' in text


def test_history_reads_summaries_oldest_first_and_skips_strangers(tmp_path):
    from reconciler.shell.gates.bench_results import brief, history, last, line

    d = tmp_path / "r" / "benchmarks"
    d.mkdir(parents=True)
    for run, status in (("20261205T010000Z-a", SUCCEEDED), ("20261205T020000Z-b", FAILED)):
        (d / f"{run}.json").write_text(json.dumps({"run": run, "status": status, "reason": "x" if status == FAILED else "",
                                                   "levels": [{"concurrency": 4}]}))
    (d / "notes.json").write_text("[1, 2]")
    (d / "broken.json").write_text("{")
    assert [r["run"] for r in history(tmp_path, "r")] == ["20261205T010000Z-a", "20261205T020000Z-b"]
    assert brief(last(tmp_path, "r"))["status"] == FAILED
    assert line(last(tmp_path, "r")).startswith("Failed 20261205T020000Z-b") and "(x)" in line(last(tmp_path, "r"))
    assert history(tmp_path, "nothing") == [] and last(tmp_path, "nothing") is None


@needs_aiperf
def test_a_cancelled_run_is_recorded_as_cancelled(tmp_path):
    """A rollout cancels the step (SIGTERM): aiperf is stopped and the run says Cancelled, never Succeeded."""
    from helpers import wait_until

    proc, url = start_mocker(tmp_path, "--speedup-ratio", "0.05", "--model-path", str(make_model_dir(tmp_path / "tok")))
    p = bench_plan(BenchmarkConfig(type="sa-bench", isl=32, osl=64, concurrencies=1, num_prompts_mult=50,
                                   num_warmup_mult=0))
    plan = {"type": p.type, "isl": p.isl, "osl": p.osl, "max_error_rate": 0.0, "timeout": 600,
            "levels": [{"concurrency": 1, "args": p.aiperf_args(p.levels[0], "m", str(tmp_path / "tok"))}]}
    run = subprocess.Popen([sys.executable, "-m", "reconciler.benchrun", "--aiperf", str(AIPERF), "--url", url, "--out",
                            str(tmp_path / "b"), "--subject", "s", "--plan", json.dumps(plan)],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_until(lambda: list((tmp_path / "b").rglob("aiperf.log")), timeout=60, what="aiperf started")
        run.terminate()
        out, _ = run.communicate(timeout=60)
    finally:
        proc.stop()
    (f,) = (tmp_path / "b").glob("*.json")
    s = json.loads(f.read_text())
    assert run.returncode == 3 and s["status"] == "Cancelled", out


def test_only_the_newest_runs_are_kept(tmp_path):
    from reconciler.benchrun.__main__ import prune

    for i in range(5):
        (tmp_path / f"2026120{i}T000000Z-s.json").write_text("{}")
        (tmp_path / f"2026120{i}T000000Z-s" / "c1").mkdir(parents=True)
    assert prune(tmp_path, keep=2) == [f"2026120{i}T000000Z-s" for i in range(3)]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "20261203T000000Z-s", "20261203T000000Z-s.json", "20261204T000000Z-s", "20261204T000000Z-s.json"]


def test_why_aiperf_failed_is_its_last_error_line(tmp_path):
    from reconciler.benchrun.__main__ import why_failed

    log = tmp_path / "aiperf.log"
    log.write_text("starting\nOSError: Can't load tokenizer for 'Qwen/Qwen3'\n│ some box │\nLog File: /x\n")
    assert why_failed(log) == "OSError: Can't load tokenizer for 'Qwen/Qwen3'"
    log.write_text("only this\n")
    assert why_failed(log) == "only this"
