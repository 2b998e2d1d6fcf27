"""The real vLLM under the reconciler on the real Slurm: served, probed, relaunched, rolled.

vLLM's CPU build (.stacks/vllm) runs ``vllm serve`` exactly as the vLLM backend renders it,
on the tiny random-weights Llama, behind the built-in router and the gateway. One deployment
is started for the module and its tests run in order on it (each cold start costs minutes).
Strict mode (RECONCILER_REQUIRE_SLURM=1) fails rather than skips when vLLM is missing.
"""

from __future__ import annotations

import json
import math
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from harness import Harness, job_fields, scancel, sh, slurm_epoch
from helpers import get, post, wait_until
from reconciler.world import life_name
from support.clients import Client
from support.record import events
from support.vllm import COLD_START, EAGER, deployment, recipe, split, step_started

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(2400)]


@pytest.fixture(scope="module")
def dep(tmp_path_factory):
    """(harness, recipe name, endpoint, served model name) of one Ready vLLM deployment."""
    yield from deployment(tmp_path_factory, "vllm-real", "vllm", 0, lambda name, model: recipe(name, model))


def _status(h: Harness, name: str) -> dict:
    return json.loads((h.state / name / "status.json").read_text())


def _launches(h: Harness, name: str) -> dict:
    return json.loads((h.state / name / "launches.json").read_text())


def _engine_url(h: Harness, name: str) -> str:
    rec = _launches(h, name)["agg_0"]
    node, ports = next(iter(rec["ports"].items()))
    return f"http://{node}:{ports['http']}"


def test_a_vllm_deployment_is_ready_and_answers_through_the_gateway(dep):
    h, name, endpoint, served = dep
    status, body = post(endpoint + "/v1/chat/completions",
                        {"model": served, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 8}, timeout=60)
    assert status == 200, body
    reply = json.loads(body)
    assert reply["model"] == served and reply["usage"]["completion_tokens"] >= 1, reply
    # the engine behind it is vLLM itself: its own /v1/models names the same model, its log its version
    status, body = get(_engine_url(h, name) + "/v1/models", timeout=10)
    assert status == 200 and json.loads(body)["data"][0]["id"] == served
    assert "version 0.32.0" in (h.state / name / "logs" / "agg_0.0.log").read_text(errors="replace")


def test_every_name_the_backend_and_the_autoscaler_read_is_one_vllm_serves(dep):
    """Health, readiness and metrics: the names the backend declares and the autoscaler and the
    status page look up, read from the real engine's /health and /metrics."""
    from reconciler.backends.registry import backend_for
    from reconciler.desired.admission import load_file
    from reconciler.shell.elastic.engine_metrics import NAMES, parse
    from reconciler.ui.history import ITL, REQUESTS, TTFT

    h, name, endpoint, served = dep
    post(endpoint + "/v1/chat/completions", {"model": served, "messages": [{"role": "user", "content": "hi"}],
                                             "max_tokens": 4}, timeout=60)
    backend = backend_for(load_file(h.manifests / f"{name}.yaml")[0].recipe, "agg")
    probe = backend.health_probe("agg")
    base = _engine_url(h, name)
    assert get(base + probe.path, timeout=10)[0] == 200
    status, body = get(base + "/metrics", timeout=10)
    assert status == 200
    text = body.decode()
    # family names as a Prometheus client reads them (a counter's without its _total, as engine_metrics does)
    families = {n for fam in text_string_to_metric_families(text) for n in (fam.name, fam.name.removesuffix("_total"))}
    # every quantity the autoscaler reads has a vLLM name that this vLLM serves
    missing = {q: [n for n in names if n.startswith("vllm:")] for q, names in NAMES.items()
               if q != "requests" and not any(n in families for n in names if n.startswith("vllm:"))}
    assert not missing, f"vLLM serves none of these names: {missing}"
    assert "vllm:request_success" in families
    for names in (REQUESTS, TTFT, ITL):
        assert any(n in families for n in names), f"the status page reads {names}; vLLM serves none"
    reading = parse(text)
    assert {"waiting", "running", "kv_usage"} <= set(reading.gauges), reading.gauges
    assert {"ttft", "itl"} <= set(reading.buckets) and reading.requests >= 1, reading


def test_a_killed_engine_is_relaunched_and_serves_again(dep, summary):
    h, name, endpoint, served = dep
    before = _launches(h, name)["agg_0"]
    step = h.steps(name)["agg_0"][0]
    scancel(step)
    # the relaunch: a new step of the same unit, then Ready again (a cold start: minutes, not seconds)
    new = wait_until(lambda: (s := h.steps(name).get("agg_0")) and s[0] != step and s[0], timeout=120,
                     what="agg_0 relaunched")
    started = step_started(new)
    # Ready again: this life's launch-to-Ready is recorded (status.json may still say the old life's Ready)
    rec = wait_until(lambda: (r := _launches(h, name)["agg_0"])["launches"] == before["launches"] + 1
                     and r.get("readyAfter") is not None and r, timeout=COLD_START, interval=1,
                     what="agg_0's relaunch Ready (readyAfter in launches.json)")
    g = wait_until(lambda: (g := h.get(name))["status"] == "Ready" and g, timeout=60, what=f"{name} Ready again")
    assert g["endpoint"] == endpoint
    status, body = post(endpoint + "/v1/chat/completions",
                        {"model": served, "messages": [{"role": "user", "content": "again"}], "max_tokens": 4}, timeout=60)
    assert status == 200, body
    log = h.state / name / "logs" / f"{life_name('agg_0', rec['slot'])}.0.log"
    s = split(log, rec["lastLaunch"], started, rec["readyAfter"])
    summary(f"vllm relaunch: {s.row()}")
    assert 0 < s.warmup < s.total and s.imports < s.total


def test_a_lowered_time_limit_is_handed_over_with_no_failed_request(dep, summary):
    """The engine's job gets a time limit (an administrator's ``scontrol update``, as backfill with
    --time-min also grants less): the reconciler submits a successor at once, vLLM starts there
    beside the old life (a real start: minutes), takes over the route, and the old job is released
    before Slurm would end it; a client sending all along sees no failure. The deployment goes on
    on the successor job (no limit: the recipe sets none)."""
    h, name, endpoint, served = dep
    (first,) = h.jobs(name)
    # a hand-over time longer than the time left below, so that the successor is due at once
    # (capped at half the granted limit: the job must have run at least as long as it has left).
    # The same spec otherwise: no rollout.
    (h.manifests / f"{name}.yaml").write_text(recipe(name, h.model, extra="reconcile: {handover_seconds: 1200}\n"))
    # Time left for the successor's start and the switch: 2.5 times this deployment's slowest start
    # so far (the reconciler's own record), 5 to 15 minutes. The successor's start is slower than the
    # relaunch's: a soak run at load 12 took 339 s where the relaunch had taken 127 s and the first
    # start 247 s, and with 336 s left the old job reached its end 5 s after the successor was Ready.
    # The job must have run as long as it has left, plus 90 s (the limit is whole minutes, rounded up).
    starts = json.loads((h.state / name / "startup.json").read_text())["roles"]["agg"]
    left = min(max(2.5 * max((s["readyAfter"] for s in starts if s.get("readyAfter")), default=0), 300), 900)
    running = lambda: time.time() - slurm_epoch(job_fields(first)["StartTime"])  # noqa: E731
    wait_until(lambda: running() >= left + 90, timeout=left + 120, interval=5,
               what=f"job {first} running for {left + 90:.0f} s")
    client = Client(endpoint, limit=100000, max_tokens=4, timeout=60, pause=0.2)
    client.start()
    try:
        wait_until(lambda: client.ok >= 3, timeout=60, what="the client's first answers")
        sh("scontrol", "update", f"jobid={first}", f"timelimit={math.ceil((running() + left) / 60)}")
        lowered = time.time()
        end = slurm_epoch(job_fields(first)["EndTime"])
        wait_until(lambda: first not in h.jobs(name) and len(h.jobs(name)) == 1, timeout=end - time.time() + 30,
                   interval=1, what=lambda: f"the hand-over away from job {first} (jobs: {h.jobs(name)})")
        gone = time.time()
        assert gone < end, f"job {first} ended by Slurm's limit, not released"  # released before Slurm's end
        g = wait_until(lambda: (g := h.get(name))["status"] == "Ready" and g, timeout=60, what=f"{name} Ready")
        assert g["endpoint"] == endpoint
        ok = client.ok
        wait_until(lambda: client.ok >= ok + 3, timeout=60, what="answers from the successor")
    finally:
        client.halt.set()
        client.join(90)
    assert events(h, name, "AllocationLost") == []
    assert len([e for e in events(h, name, "SubmitAlloc") if f"successor of job {first}" in e["message"]]) == 1
    summary(f"vllm hand-over: job {first} released {gone - lowered:.0f} s after its limit was lowered to "
            f"{end - lowered:.0f} s ahead; {client.ok} requests, {len(client.failed)} failed")
    assert not client.failed, client.failed[:5]


def test_a_flag_change_rolls_the_engine_with_no_failed_request(dep, summary):
    """A new engine flag: the new life starts beside the old (surge), the old leaves only once the
    new one is Ready and routed; a client sending all along sees no failure."""
    h, name, endpoint, served = dep
    first = h.steps(name)["agg_0"][0]
    # a request every ~0.2 s, not back to back: a gap in service longer than that still fails one,
    # and the client no longer keeps the old engine, the router and the gateway busy for the whole
    # surge (7,778 requests back to back in 454 s, 2026-12-07: the new life's start shared the cores with them)
    client = Client(endpoint, limit=100000, max_tokens=4, timeout=60, pause=0.2)
    client.start()
    try:
        wait_until(lambda: client.ok >= 3, timeout=60, what="the client's first answers")
        # a flag the corpus's own vLLM recipes set (enforce-eager): the new life also skips torch.compile
        (h.manifests / f"{name}.yaml").write_text(recipe(name, h.model, args=EAGER))
        t0 = time.monotonic()
        def alone() -> bool:  # one life of agg_0 left, and not the first one (lives: both during the surge)
            mine = [sid for unit, _, sid in h.lives(name) if unit == "agg_0"]
            return len(mine) == 1 and mine[0] != first
        wait_until(alone, timeout=COLD_START + 120, interval=1, what="agg_0 on its new life alone")
        took = time.monotonic() - t0
        ok_at_switch = client.ok
        wait_until(lambda: client.ok >= ok_at_switch + 3, timeout=60, what="answers from the new life")
    finally:
        client.halt.set()
        client.join(90)
    summary(f"vllm rolling update: {client.ok} requests, {len(client.failed)} failed; the old life left "
            f"{took:.0f} s after the edit")
    assert not client.failed, client.failed[:5]
    # the engine that serves now is the new spec's: vLLM logs the flag among its non-default args
    rec = _launches(h, name)["agg_0"]
    log = (h.state / name / "logs" / f"{life_name('agg_0', rec['slot'])}.0.log").read_text(errors="replace")
    assert "'enforce_eager': True" in log

