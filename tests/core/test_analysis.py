"""Rollout analysis (core/plan/analysis.py, core/plan/rollout.py): a surge life is measured at its own
address before it is routed, and replaces the old life only if it passes; a failed spec is not tried
again. Expectation tables on hand-built state (FakeCluster), as tests/core/test_surge.py."""

from __future__ import annotations

import textwrap

import pytest

from fakes import FakeCluster, recipe
from reconciler.core.plan import CancelStep, LaunchStep, PlaceReason, StopReason, WaitReason
from reconciler.core.plan.analysis import NEW, OLD
from reconciler.desired.admission import load_text
from reconciler.errors import RecipeError
from reconciler.shell.readiness import router_sync
from reconciler.world import UnitHealth

TEXT = """\
name: r
model: {path: /m}
resources: {gpus_per_node: 8}
engine: {type: mocker, speedup_ratio: %(speed)d}
frontend: {type: none}
roles:
  agg: {workers: %(workers)d, gpus: 1}
reconcile:
  rollout:
    max_surge: 1
    max_unavailable: 0
    analysis: {benchmark: {concurrency: 8, requests: 200}, max_ttft_p90_ms: 500, min_throughput_ratio: 0.9}
"""


def spec(workers=1, speed=10):
    return {"r": recipe(TEXT % {"workers": workers, "speed": speed})}


def run(index, against, gen="", tok=300.0, p90=50.0, ended=150.0, status="Succeeded", reason=""):
    """A finished benchrun summary as shell/gates/analysis_runs.py reads it back (``gen``: the recipe's
    generation a new life was measured for)."""
    return {"status": status, "reason": reason, "against": against, "generation": gen, "index": index,
            "output_tok_s": tok, "levels": [{"ttft_p90_ms": p90}], "ended": ended}


def gen(c, workers=1, speed=3):
    return c.desired(spec(workers, speed)).recipes["r"].generation


def cancels(p):
    return sorted((a.unit, a.reason) for a in p.actions if isinstance(a, CancelStep))


def launches(p):
    return sorted((a.unit.name, a.unit.slot, a.reason) for a in p.actions if isinstance(a, LaunchStep))


def surging(workers=1):
    """agg_0's new life launched beside its old one (slot 1); returns (cluster, old step, new step)."""
    c = FakeCluster()
    c.converge(spec(workers))
    old = next(s for s in c.steps.values() if s.index == 0)
    c.apply(c.plan(spec(workers, speed=3)))
    new = next(s for s in c.steps.values() if s.slot == 1)
    return c, old, new


def test_without_the_key_nothing_is_measured():
    c = FakeCluster()
    plain = {"r": recipe((TEXT % {"workers": 1, "speed": 10}).split("    analysis:")[0])}
    c.converge(plain)
    assert c.desired(plain).recipes["r"].analysis is None
    p = c.plan({"r": recipe((TEXT % {"workers": 1, "speed": 3}).split("    analysis:")[0])})
    assert p.recipes["r"].measure == ()


# baseline: the old spec's runs; ready: the new life answers; new: its run -> what happens now
@pytest.mark.parametrize("baseline, ready, new_run, want", [
    # no earlier result for the old life: it is measured first, while the new one starts
    (None, False, None, ("measure", OLD)),
    (None, True, None, ("measure", OLD)),
    # a result for the old spec exists: the new life starts, then is measured once Ready
    ("ok", False, None, ("wait", WaitReason.SURGE_STARTING)),
    ("ok", True, None, ("measure", NEW)),
    # its figures: output tok/s at least 0.9 of the old life's and TTFT p90 at most 500 ms
    ("ok", True, dict(tok=100.0), ("failed", "throughput ratio 0.33 < min_throughput_ratio 0.9")),
    ("ok", True, dict(tok=290.0, p90=900.0), ("failed", "TTFT p90 900.0 ms > max_ttft_p90_ms 500")),
    ("ok", True, dict(status="Failed", reason="at concurrency 8: 0 output tokens in 200 requests", tok=0.0),
     ("failed", "its run failed: at concurrency 8: 0 output tokens")),
    ("ok", True, dict(tok=280.0, p90=400.0), ("passed", None)),
    # a run of an earlier version of the file (a change that left this worker's argv alone) is no verdict
    ("ok", True, dict(tok=100.0, gen="an older generation"), ("measure", NEW)),
    # a broken old life (its own run failed) gives no ratio: the new one is judged on its own figures
    ("broken", True, dict(tok=10.0), ("passed", None)),
])
def test_what_a_surge_under_analysis_does(baseline, ready, new_run, want):
    c, old, new = surging()
    if baseline == "ok":
        c.analysis[("r", "agg", old.spec_hash)] = (run(0, old.spec_hash),)
    elif baseline == "broken":
        c.analysis[("r", "agg", old.spec_hash)] = (run(0, old.spec_hash, tok=0.0, status="Failed"),)
    if new_run is not None:
        c.analysis[("r", "agg", new.spec_hash)] = (run(0, old.spec_hash, **({"gen": gen(c)} | new_run)),)
    if ready:
        c.health[new.unit_key] = UnitHealth(launches=2, was_ready=True, ready_since=100.0, first_ready=100.0)
    else:
        c.unready.add((new.unit_key, 1))
    p = c.plan(spec(speed=3), now=151.0)
    rp, w = p.recipes["r"], p.recipes["r"].waiting["agg_0"]
    d = c.desired(spec(speed=3)).recipes["r"]
    kind, what = want
    if kind == "measure":
        (m,) = rp.measure
        life_url = d.previous[("agg", 0)].url if what == OLD else d.units[0].url
        assert (m.life, m.url, m.unit) == (what, life_url, "agg_0") and m.against == old.spec_hash
        assert m.spec == (old.spec_hash if what == OLD else new.spec_hash)
        assert not p.actions and w.reason is WaitReason.ANALYSING
    elif kind == "wait":
        assert rp.measure == () and not p.actions and w.reason is what
    elif kind == "failed":
        assert cancels(p) == [("agg_0", StopReason.ANALYSIS_FAILED)] and p.actions[0].step_id == new.step_id
        assert w.reason is WaitReason.ROLLOUT_FAILED and what in w.detail and "new life" in w.detail
        assert launches(p) == [] and rp.measure == ()
    else:  # passed: the hand-over clock runs from the run's end (150), not the first Ready (100)
        assert not p.actions and w.reason is WaitReason.SURGE_HANDOVER and "routed beside" in w.detail
        assert cancels(c.plan(spec(speed=3), now=154.0)) == []  # 150 + pick-up 2 + drain 3 = 155
        assert cancels(c.plan(spec(speed=3), now=155.0)) == [("agg_0", StopReason.SUPERSEDED)]


@pytest.mark.parametrize("new_run, new_routed", [
    (None, False),  # not measured yet: no router, no endpoints file has it
    (dict(tok=100.0), False),  # failed
    (dict(tok=295.0), True),  # passed
])
def test_the_new_life_takes_no_request_until_it_passes_and_the_old_one_is_routed_meanwhile(new_run, new_routed):
    c, old, new = surging()
    c.analysis[("r", "agg", old.spec_hash)] = (run(0, old.spec_hash),)
    if new_run is not None:
        c.analysis[("r", "agg", new.spec_hash)] = (run(0, old.spec_hash, gen(c), ended=100.0, **new_run),)
    c.health[new.unit_key] = UnitHealth(launches=2, was_ready=True, ready_since=10.0, first_ready=10.0)
    d = c.desired(spec(speed=3)).recipes["r"]
    o = c.observed(c.desired(spec(speed=3)))
    assert router_sync.serving(d, o, d.units[0]) is new_routed
    # the old life: routed until the new one has passed and been picked up (100 + 2 s)
    assert [u.slot for u in router_sync.old_lives(d, o, 101.0)] == [0]
    assert [u.slot for u in router_sync.old_lives(d, o, 103.0)] == ([] if new_routed else [0])
    assert (new.spec_hash and set(router_sync.wanted(d, o, 103.0))) == (
        {d.units[0].url} if new_routed else {d.previous[("agg", 0)].url})


def test_a_failed_spec_is_not_tried_again_until_the_recipe_changes():
    c, old, new = surging(workers=2)
    c.analysis[("r", "agg", old.spec_hash)] = (run(0, old.spec_hash),)
    c.analysis[("r", "agg", new.spec_hash)] = (run(0, old.spec_hash, gen(c, 2), tok=90.0),)
    c.health[new.unit_key] = UnitHealth(launches=2, was_ready=True, ready_since=100.0, first_ready=100.0)
    c.apply(c.plan(spec(2, speed=3), now=151.0))
    assert [s.slot for s in c.steps.values()] == [0, 0] and new.step_id not in c.steps  # the new life is gone
    c.health.clear()
    for now in (152.0, 10_000.0):
        p = c.plan(spec(2, speed=3), now=now)
        waits = {u: w.reason for u, w in p.recipes["r"].waiting.items()}
        # neither agg_0 again nor agg_1 (the same recipe generation): both old lives serve on
        assert not p.actions and waits == {"agg_0": WaitReason.ROLLOUT_FAILED, "agg_1": WaitReason.ROLLOUT_FAILED}
    # a changed recipe is a new generation and new spec hashes: it rolls (and is measured) again
    assert launches(c.plan(spec(2, speed=5), now=10_001.0)) == [("agg_0", 1, PlaceReason.REPLACEMENT)]


def test_a_passing_rollout_converges_and_its_run_is_the_next_baseline():
    c, old, new = surging()
    c.analysis[("r", "agg", old.spec_hash)] = (run(0, old.spec_hash),)
    c.analysis[("r", "agg", new.spec_hash)] = (run(0, old.spec_hash, gen(c), tok=299.0, ended=120.0),)
    c.health[new.unit_key] = UnitHealth(launches=2, was_ready=True, ready_since=100.0, first_ready=100.0)
    c.apply(c.plan(spec(speed=3), now=130.0))
    assert [s.spec_hash for s in c.steps.values()] == [new.spec_hash]
    c.health.clear()
    p = c.plan(spec(speed=2), now=200.0)  # the next rollout: no old life to measure, the new one's run is there
    assert launches(p) == [("agg_0", 0, PlaceReason.REPLACEMENT)] and p.recipes["r"].measure == ()


def _load(text):
    return load_text(textwrap.dedent(text), "r.yaml")


LINE = "    analysis: {benchmark: {concurrency: 8, requests: 200}, max_ttft_p90_ms: 500, min_throughput_ratio: 0.9}"


@pytest.mark.parametrize("new, key, fragment", [
    ("    analysis: {benchmark: {concurrency: 0}}", "reconcile.rollout.analysis.benchmark.concurrency",
     "greater than or equal to 1"),
    ("    analysis: {benchmark: {requests: 10000000}}", "reconcile.rollout.analysis.benchmark.requests",
     "less than or equal to 100000"),
    ("    analysis: {benchmark: {concurrency: 64, requests: 10}}", "reconcile.rollout.analysis.benchmark",
     "must be at least concurrency"),
    ("    analysis: {max_ttft_p90_ms: -5}", "reconcile.rollout.analysis.max_ttft_p90_ms", "greater than 0"),
    ("    analysis: {min_throughput_ratio: 50}", "reconcile.rollout.analysis.min_throughput_ratio",
     "less than or equal to 10"),
    ("    analysis: {timeout_seconds: 1}", "reconcile.rollout.analysis.timeout_seconds", "greater than or equal to 10"),
    ("    analysis: {max_ttft_p90: 5}", "reconcile.rollout.analysis.max_ttft_p90", "unknown key"),
])
def test_bad_analysis_settings_are_located_and_bounded(new, key, fragment):
    text = TEXT % {"workers": 1, "speed": 10}
    assert LINE in text
    with pytest.raises(RecipeError) as ei:
        _load(text.replace(LINE, new))
    e = ei.value
    assert e.key == key and e.line == 12 and fragment in e.message, str(e)


def test_analysis_needs_surge():
    text = (TEXT % {"workers": 1, "speed": 10}).replace("max_surge: 1\n    max_unavailable: 0",
                                                        "max_surge: 0\n    max_unavailable: 1")
    with pytest.raises(RecipeError) as ei:
        _load(text)
    assert "analysis needs max_surge >= 1" in ei.value.message and ei.value.key == "reconcile.rollout"


def test_a_disaggregated_recipe_is_refused_with_why():
    text = (TEXT % {"workers": 1, "speed": 10}).replace("  agg: {workers: 1, gpus: 1}",
                                                        "  prefill: {workers: 1, gpus: 1}\n  decode: {workers: 1, gpus: 1}")
    with pytest.raises(RecipeError) as ei:
        _load(text)
    e = ei.value
    assert e.key == "reconcile.rollout.analysis" and "a prefill worker does not answer a request by itself" in e.message
    assert e.line is not None, str(e)


def test_a_dynamo_worker_is_refused_with_why():
    text = (TEXT % {"workers": 1, "speed": 10}).replace("frontend: {type: none}",
                                                        "frontend: {type: dynamo, enable_multiple_frontends: false}")
    with pytest.raises(RecipeError) as ei:
        _load(text)
    assert ei.value.key == "reconcile.rollout.analysis" and "serve no OpenAI API of their own" in ei.value.message


def test_a_recipe_backing_off_after_a_failed_action_keeps_its_measurement_going():
    from dataclasses import replace

    from reconciler.core.plan import plan
    from reconciler.world import ActionFailures

    c, old, new = surging(workers=2)
    c.unready.add((new.unit_key, 1))
    del c.steps[next(s.step_id for s in c.steps.values() if s.index == 1)]  # agg_1 is to be launched again
    desired = c.desired(spec(2, speed=3))
    o = replace(c.observed(desired), action_failures={"r": ActionFailures(1, 150.0)})
    rp = plan(desired, o, 151.0).recipes["r"]
    assert rp.deferred and not rp.actions and [m.life for m in rp.measure] == [OLD]
