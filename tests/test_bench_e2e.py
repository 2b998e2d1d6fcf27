"""End to end on the real local Slurm: a recipe's benchmark: section runs through aiperf once the
recipe is Ready, its result shows in describe / get -o json / benchmarks NAME, a run against a
mocker that answers with 0 tokens is Failed with the reason, and a finished run is not restarted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness import Harness
from helpers import wait_until
from reconciler.mocker.model_dir import make_model_dir
from support.stacks import copy_recipe, stack, stack_tools, tiny_model  # noqa: F401 - fixtures among them

pytestmark = pytest.mark.needs("aiperf")

RECIPE = """\
name: {name}
model: {{path: "{model}"}}
resources: {{gpus_per_node: 8}}
engine: {{type: mocker, speedup_ratio: 100}}
roles: {{agg: {{workers: 1, gpus: 1{args}}}}}
frontend: {{type: builtin}}
reconcile: {{benchmark: {{}}}}
benchmark: {{type: sa-bench, isl: 32, osl: 16, concurrencies: "2", num_prompts_mult: 4, num_warmup_mult: 1}}
"""


@pytest.fixture(params=[pytest.param("slurm", marks=pytest.mark.slurm), "local"])
def h(request, tmp_path):
    harness = Harness(tmp_path, request.param)
    yield harness
    harness.cleanup()


def _runs(h: Harness, name: str) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((h.state / name / "benchmarks").glob("*.json"))]


def _cli_json(h: Harness, *args: str):
    r = h.cli(*args, "-o", "json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _cli_events(h: Harness, name: str) -> list[dict]:
    r = subprocess.run([sys.executable, "-m", "reconciler.cli", "events", name, "--state", str(h.state), "-o", "json"],
                       capture_output=True, text=True, timeout=60, env=h.env)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _benchmarks(h: Harness, name: str, *out: str) -> str:
    r = subprocess.run([sys.executable, "-m", "reconciler.cli", "benchmarks", name, "--state", str(h.state), *out],
                       capture_output=True, text=True, timeout=60, env=h.env)
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.mark.parametrize("args, status, reason", [
    ("", "Succeeded", ""),
    (", args: {emit-tokens: 0}", "Failed", "0 output tokens"),
], ids=["good", "zero-tokens"])
def test_benchmark_runs_once_after_ready_and_is_shown(h, tmp_path, args, status, reason):
    model = make_model_dir(tmp_path / "tok")
    name = h.name("bench")
    (h.manifests / f"{name}.yaml").write_text(RECIPE.format(name=name, model=model, args=args))
    h.start()
    h.wait_ready(name, timeout=90)
    (run,) = wait_until(lambda: _runs(h, name), timeout=240, what=f"a benchmark summary ({h.log()[-2000:]})")
    assert run["status"] == status and reason in run["reason"], run
    assert run["type"] == "sa-bench" and run["levels"][0]["concurrency"] == 2 and run["subject"]
    if status == "Succeeded":
        assert run["output_tokens"] == 8 * 16 and run["errors"] == 0 and run["req_s"] > 0
    assert list(Path(run["artifacts"]).rglob("aiperf.log"))  # the raw artifacts, beside
    # its step ends and is not restarted: no svc-benchmark step while the recipe stays Ready
    wait_until(lambda: "svc-benchmark_0" not in h.steps(name), timeout=30, what="the benchmark step gone")
    h.idle(name)
    assert "svc-benchmark_0" not in h.steps(name) and len(_runs(h, name)) == 1
    g = h.get(name)
    assert g["status"] == "Ready", g  # a failed benchmark is a verdict on the deployment, not a down unit
    assert g["benchmark"]["status"] == status and g["benchmark"]["run"] == run["run"]
    doc = _cli_json(h, "describe", name)
    assert doc["benchmark"]["last"]["run"] == run["run"]
    assert doc["benchmark"]["state"].startswith("ran once to its end")
    text = h.cli("describe", name).stdout
    assert f"last: {status} {run['run']}" in text, text
    assert [r["run"] for r in json.loads(_benchmarks(h, name, "-o", "json"))] == [run["run"]]
    listed = _benchmarks(h, name)
    assert run["run"] in listed and status in listed
    events = [e for e in _cli_events(h, name) if e["kind"].startswith("Benchmark")]
    assert [(e["kind"], e["run"]) for e in events] == [(f"Benchmark{status}", run["run"])], events


@pytest.mark.slurm
def test_srtctls_dynamo_agg_runs_its_sa_bench_through_aiperf(stack, corpus):
    """srtctl's own mocker recipe (Dynamo frontend, dynamo.mocker, etcd) with reconcile.benchmark
    added: its sa-bench section (isl 128, osl 128, concurrency 4) runs through aiperf."""
    h = stack
    name, f = copy_recipe(h, corpus, "srt-slurm-v2/mocker/dynamo-agg.yaml")
    f.write_text(f.read_text() + "\nreconcile:\n  benchmark: {on: [ready, rollout]}\n")
    h.start()
    h.wait_ready(name, timeout=120)
    (run,) = wait_until(lambda: _runs(h, name), timeout=300, what=f"a benchmark summary ({h.log()[-2000:]})")
    assert run["status"] == "Succeeded", run
    assert (run["isl"], run["osl"], [lv["concurrency"] for lv in run["levels"]]) == (128, 128, [4])
    # srtctl: 10 x concurrency prompts; aiperf counts the answers with the tokenizer (re-tokenized text: >= osl)
    assert run["levels"][0]["requests"] == 40 and run["output_tokens"] >= 40 * 128 and run["errors"] == 0
    text = h.cli("describe", name).stdout
    assert f"last: Succeeded {run['run']}" in text, text


# two aiperf runs and a rollout: 58 s on a quiet machine, 291 s in CI's suite on 2 cores (aiperf's
# start-up is CPU-bound, its waits are stretched by the load factor, the suite-wide 300 s is not)
@pytest.mark.timeout(600)
def test_a_rollout_runs_it_again_once_settled(h, tmp_path):
    """on: [ready, rollout]: a spec change rolls the worker; once every unit runs the new spec and is
    Ready, a second run measures it (another subject), and no third one follows."""
    model = make_model_dir(tmp_path / "tok")
    name = h.name("bench")
    f = h.manifests / f"{name}.yaml"
    text = RECIPE.format(name=name, model=model, args="").replace("benchmark: {}", "benchmark: {on: [ready, rollout]}")
    f.write_text(text)
    h.start()
    (first,) = wait_until(lambda: _runs(h, name), timeout=240, what="the first benchmark summary")
    wait_until(lambda: "svc-benchmark_0" not in h.steps(name), timeout=30, what="the first run's step gone")
    f.write_text(text.replace("speedup_ratio: 100", "speedup_ratio: 50"))
    runs = wait_until(lambda: len(r := _runs(h, name)) == 2 and r, timeout=240, what="a second run after the rollout")
    assert runs[1]["subject"] != first["subject"] and runs[1]["status"] == "Succeeded", runs[1]
    assert runs[1]["started"] > first["ended"]
    wait_until(lambda: "svc-benchmark_0" not in h.steps(name), timeout=30, what="the second run's step gone")
    h.idle(name)
    assert len(_runs(h, name)) == 2
