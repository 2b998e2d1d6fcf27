"""reconcile.autoscale: the block is validated with located errors, every number bounded."""

from __future__ import annotations

import textwrap

import pytest

from reconciler.desired.admission import load_text
from reconciler.errors import RecipeError

DISAGG = """\
schema: 2
name: demo
model: {path: /models/m}
resources: {gpus_per_node: 8}
engine: mocker
roles:  # each role on nodes of its own (no node count at all packs decode after prefill, as srtctl)
  prefill: {nodes: 1, workers: 1, gpus: 1}
  decode: {nodes: 1, workers: 2, gpus: 1}
frontend: {type: builtin}
reconcile:
  autoscale:
    roles:
      decode: {min: 1, max: 8, target: {itl_p90_ms: 40}}
      prefill: {min: 1, max: 4, target: {ttft_p90_ms: 800, waiting_per_worker: 4}}
    scale_down_after_seconds: 120
"""


def load(text: str):
    return load_text(textwrap.dedent(text), "demo.yaml")


def test_the_issue_example_loads_with_hpa_defaults():
    cfg = load(DISAGG).recipe.reconcile.autoscale
    assert cfg is not None
    assert cfg.roles.decode.max == 8 and cfg.roles.decode.target.itl_p90_ms == 40
    assert cfg.roles.prefill.target.waiting_per_worker == 4 and cfg.roles.agg is None
    assert cfg.scale_down_after_seconds == 120 and cfg.scale_up_after_seconds == 0
    assert (cfg.scale_up_limit.workers, cfg.scale_up_limit.percent, cfg.scale_up_limit.period_seconds) == (4, 100, 15)
    assert cfg.scale_to_zero_after_seconds is None


def test_no_block_is_no_autoscaling():
    text = DISAGG.split("reconcile:")[0]
    assert load(text).recipe.reconcile.autoscale is None


@pytest.mark.parametrize("old, new, key, line, fragment", [
    ("{min: 1, max: 8, target: {itl_p90_ms: 40}}", "{min: 1, max: 8, target: {itl_p90: 40}}",
     "reconcile.autoscale.roles.decode.target.itl_p90", 13, "itl_p90_ms"),
    ("{min: 1, max: 8, target: {itl_p90_ms: 40}}", "{min: 1, max: 8, target: {}}",
     "reconcile.autoscale.roles.decode.target", 13, "at least one target"),
    ("{min: 1, max: 8, target: {itl_p90_ms: 40}}", "{min: 9, max: 8, target: {itl_p90_ms: 40}}",
     "reconcile.autoscale.roles.decode", 13, "min (9) is above max (8)"),
    ("{min: 1, max: 8, target: {itl_p90_ms: 40}}", "{min: 1, max: 100000, target: {itl_p90_ms: 40}}",
     "reconcile.autoscale.roles.decode.max", 13, "less than or equal to 10000"),
    ("{min: 1, max: 8, target: {itl_p90_ms: 40}}", "{min: 1, max: 8, target: {itl_p90_ms: -1}}",
     "reconcile.autoscale.roles.decode.target.itl_p90_ms", 13, "greater than 0"),
    ("{min: 1, max: 8, target: {itl_p90_ms: 40}}", "{min: 1, max: 8, target: {kv_usage: 2}}",
     "reconcile.autoscale.roles.decode.target.kv_usage", 13, "less than or equal to 1"),
    ("{min: 1, max: 8, target: {itl_p90_ms: 40}}", "{min: 1, target: {itl_p90_ms: 40}}",
     "reconcile.autoscale.roles.decode.max", 13, "missing"),
    ("scale_down_after_seconds: 120", "scale_down_after_seconds: 1e9",
     "reconcile.autoscale.scale_down_after_seconds", 15, "less than or equal to 86400"),
    ("scale_down_after_seconds: 120", "interval_seconds: 0",
     "reconcile.autoscale.interval_seconds", 15, "greater than or equal to 1"),
    ("scale_down_after_seconds: 120", "scale_up_limit: {workers: 0}",
     "reconcile.autoscale.scale_up_limit.workers", 15, "greater than or equal to 1"),
    ("scale_down_after_seconds: 120", "scale_down_after: 120",
     "reconcile.autoscale.scale_down_after", 15, "unknown key"),
    ("scale_down_after_seconds: 120", "scale_to_zero_after_seconds: 1",
     "reconcile.autoscale.scale_to_zero_after_seconds", 15, "greater than or equal to 5"),
    ("scale_down_after_seconds: 120", "scale_to_zero_after_seconds: 1e9",
     "reconcile.autoscale.scale_to_zero_after_seconds", 15, "less than or equal to 604800"),
    ("scale_down_after_seconds: 120", "hold_timeout_seconds: 0",
     "reconcile.autoscale.hold_timeout_seconds", 15, "greater than or equal to 1"),
    ("scale_down_after_seconds: 120", "hold_timeout_seconds: 3600",
     "reconcile.autoscale.hold_timeout_seconds", 15, "less than or equal to 1800"),
    ("scale_down_after_seconds: 120", "policy: forecast",
     "reconcile.autoscale.policy", 15, "'reactive' or 'predictive'"),
    ("scale_down_after_seconds: 120", "policy: predictive\n    forecast_window_seconds: 1",
     "reconcile.autoscale.forecast_window_seconds", 16, "greater than or equal to 2"),
    ("scale_down_after_seconds: 120", "policy: predictive\n    forecast_window_seconds: 7200",
     "reconcile.autoscale.forecast_window_seconds", 16, "less than or equal to 3600"),
    ("scale_down_after_seconds: 120", "warm: -1", "reconcile.autoscale.warm", 15, "greater than or equal to 0"),
    ("scale_down_after_seconds: 120", "warm: 101", "reconcile.autoscale.warm", 15, "less than or equal to 100"),
    ("scale_down_after_seconds: 120", "warm: two", "reconcile.autoscale.warm", 15, "valid integer"),
])
def test_schema_rejections_are_located(old, new, key, line, fragment):
    assert old in DISAGG
    with pytest.raises(RecipeError) as ei:
        load(DISAGG.replace(old, new))
    e = ei.value
    assert e.key == key, str(e)
    assert e.line == line, str(e)
    assert fragment in e.message, str(e)


def test_warm_spares_default_to_none_and_load():
    assert load(DISAGG).recipe.reconcile.autoscale.warm == 0
    assert load(DISAGG.replace("scale_down_after_seconds: 120", "warm: 2")).recipe.reconcile.autoscale.warm == 2


def test_warm_spares_need_a_role_that_can_grow():
    fixed = (DISAGG.replace("{min: 1, max: 8, target: {itl_p90_ms: 40}}", "{min: 2, max: 2, target: {itl_p90_ms: 40}}")
             .replace("prefill: {min: 1, max: 4,", "prefill: {min: 1, max: 1,"))
    assert load(fixed).recipe.reconcile.autoscale.warm == 0  # fixed roles alone are fine
    with pytest.raises(RecipeError) as ei:
        load(fixed.replace("scale_down_after_seconds: 120", "scale_down_after_seconds: 120\n    warm: 1"))
    assert ei.value.key == "reconcile.autoscale.warm" and ei.value.line is not None, str(ei.value)
    assert "every role here has max == min" in ei.value.message, str(ei.value)


def test_forecast_window_needs_the_predictive_policy_and_predictive_loads():
    assert load(DISAGG.replace("scale_down_after_seconds: 120", "policy: predictive\n    forecast_window_seconds: 60")
                ).recipe.reconcile.autoscale.forecast_window_seconds == 60
    assert load(DISAGG).recipe.reconcile.autoscale.policy == "reactive"  # the default: today's behaviour
    with pytest.raises(RecipeError) as ei:
        load(DISAGG.replace("scale_down_after_seconds: 120", "forecast_window_seconds: 60"))
    assert ei.value.key.startswith("reconcile.autoscale") and "needs policy: predictive" in ei.value.message, str(ei.value)


@pytest.mark.parametrize("old, new, key, fragment", [
    # a role the recipe does not have
    ("      decode: {min: 1, max: 8, target: {itl_p90_ms: 40}}",
     "      decode: {min: 1, max: 8, target: {itl_p90_ms: 40}}\n      agg: {min: 1, max: 2, target: {kv_usage: 0.8}}",
     "reconcile.autoscale.roles.agg", "no role 'agg' (its roles: prefill, decode)"),
    # the starting count must lie in [min, max]
    ("decode: {nodes: 1, workers: 2, gpus: 1}", "decode: {nodes: 2, workers: 9, gpus: 1}",
     "reconcile.autoscale.roles.decode", "roles.decode.workers (9) is the starting count"),
    ("{min: 1, max: 8, target: {itl_p90_ms: 40}}", "{min: 3, max: 8, target: {itl_p90_ms: 40}}",
     "reconcile.autoscale.roles.decode", "[min, max] = [3, 8]"),
    # a colocated decode's GPUs follow the prefill count: prefill cannot be autoscaled then
    ("decode: {nodes: 1, workers: 2, gpus: 1}", "decode: {nodes: colocate, workers: 2, gpus: 1}",
     "reconcile.autoscale.roles.prefill", "roles.decode colocates on the prefill nodes"),
    # scale to zero: min 0 needs the idle period; the idle period needs every role at min 0
    ("{min: 1, max: 8, target: {itl_p90_ms: 40}}", "{min: 0, max: 8, target: {itl_p90_ms: 40}}",
     "reconcile.autoscale.roles.decode.min", "needs reconcile.autoscale.scale_to_zero_after_seconds"),
    ("scale_down_after_seconds: 120", "scale_to_zero_after_seconds: 900",
     "reconcile.autoscale.roles.prefill.min", "every role needs min: 0"),
])
def test_rules_across_the_recipe_are_located(old, new, key, fragment):
    assert old in DISAGG
    with pytest.raises(RecipeError) as ei:
        load(DISAGG.replace(old, new))
    assert ei.value.key == key, str(ei.value)
    assert fragment in ei.value.message, str(ei.value)
    assert ei.value.line is not None, str(ei.value)


def test_a_colocated_decode_alone_may_be_autoscaled():
    text = DISAGG.replace("decode: {nodes: 1, workers: 2, gpus: 1}", "decode: {nodes: colocate, workers: 2, gpus: 1}")
    text = text.replace("      prefill: {min: 1, max: 4, target: {ttft_p90_ms: 800, waiting_per_worker: 4}}\n", "")
    cfg = load(text).recipe.reconcile.autoscale
    assert cfg.roles.prefill is None and cfg.roles.decode.max == 8


ZERO = """\
schema: 2
name: demo
model: {path: /models/m}
resources: {gpus_per_node: 8}
engine: mocker
roles:
  agg: {workers: 1, gpus: 1}
frontend: {type: builtin}
reconcile:
  autoscale:
    roles:
      agg: {min: 0, max: 4, target: {waiting_per_worker: 8}}
    scale_to_zero_after_seconds: 900
    hold_timeout_seconds: 120
"""


def test_scale_to_zero_is_accepted_with_every_role_at_min_0():
    cfg = load(ZERO).recipe.reconcile.autoscale
    assert cfg.roles.agg.min == 0 and cfg.scale_to_zero_after_seconds == 900 and cfg.hold_timeout_seconds == 120
    both = DISAGG.replace("{min: 1, max: 8,", "{min: 0, max: 8,").replace("{min: 1, max: 4,", "{min: 0, max: 4,")
    both = both.replace("scale_down_after_seconds: 120", "scale_to_zero_after_seconds: 600")
    assert load(both).recipe.reconcile.autoscale.scale_to_zero_after_seconds == 600


@pytest.mark.parametrize("old, new, key, fragment", [
    ("    roles:\n      agg:", "    roles:\n      agg:", None, None),  # the unchanged file loads
    ("frontend: {type: builtin}", "frontend: {type: none}",
     "reconcile.autoscale.scale_to_zero_after_seconds", "needs a frontend"),
    ("{min: 0, max: 4,", "{min: 1, max: 4,", "reconcile.autoscale.roles.agg.min", "every role needs min: 0"),
])
def test_scale_to_zero_rules_are_located(old, new, key, fragment):
    assert old in ZERO
    if key is None:
        load(ZERO.replace(old, new))
        return
    with pytest.raises(RecipeError) as ei:
        load(ZERO.replace(old, new))
    assert ei.value.key == key and fragment in ei.value.message, str(ei.value)
    assert ei.value.line is not None, str(ei.value)
