"""srtctl's benchmark types mapped to aiperf, or refused with why (reconciler/desired/bench_map.py)."""

from __future__ import annotations

import pytest

from reconciler.desired.bench_map import TYPES, BenchPlan, Level, bench_plan, concurrencies, handling
from reconciler.desired.admission import load_text
from reconciler.errors import KeyedError, RecipeError
from reconciler.recipe.carried import BenchmarkConfig

RECIPE = """
name: b
model: {{path: /tmp/m, container: c}}
resources: {{gpus_per_node: 1, agg_nodes: 1, agg_workers: 1}}
backend: {{type: mocker}}
frontend: {{type: builtin}}
reconcile: {{container_runtime: none{policy}}}
benchmark: {bench}
"""


def _load(bench: str, policy: str = ", benchmark: {}"):
    return load_text(RECIPE.format(bench=bench, policy=policy), "b.yaml", preflight=False)


@pytest.mark.parametrize("spelling, levels", [
    (4, (4,)), ("4", (4,)), ("4x8x16", (4, 8, 16)), ([4, "8"], (4, 8)),
])
def test_concurrency_spellings(spelling, levels):
    assert concurrencies(spelling) == levels


@pytest.mark.parametrize("bad", ["0", "4x", "a", [], "5000", "x".join(["1"] * 33)])
def test_bad_concurrencies_are_refused_at_their_key(bad):
    with pytest.raises(KeyedError) as e:
        concurrencies(bad)
    assert e.value.key == "benchmark.concurrencies"


def test_sa_bench_maps_srtctls_parameters_onto_aiperf():
    p = bench_plan(BenchmarkConfig(type="sa-bench", isl=128, osl=64, concurrencies="2x8", req_rate=5))
    # srtctl: num_prompts = concurrency x num_prompts_mult (10), warm-up concurrency x num_warmup_mult (2)
    assert p == BenchPlan("sa-bench", 128, 64, "5", (Level(2, 20, 4), Level(8, 80, 16)))
    args = p.aiperf_args(p.levels[1], "m", "/tok")
    for flag, value in [("--isl", "128"), ("--osl", "64"), ("--concurrency", "8"), ("--request-count", "80"),
                        ("--warmup-request-count", "16"), ("--request-rate", "5"), ("--extra-inputs", "ignore_eos:true"),
                        ("--endpoint-type", "completions"), ("--model", "m"), ("--tokenizer", "/tok")]:
        assert args[args.index(flag) + 1] == value, flag
    inf = bench_plan(BenchmarkConfig(type="sa-bench", isl=1, osl=1, concurrencies=1, num_warmup_mult=0))
    assert "--request-rate" not in inf.aiperf_args(inf.levels[0], "m", "t")  # "inf": closed loop at the concurrency
    assert "--warmup-request-count" not in inf.aiperf_args(inf.levels[0], "m", "t")


@pytest.mark.parametrize("kind", sorted(k for k, (how, _) in TYPES.items() if how == "refused"))
def test_every_refused_type_says_why(kind):
    with pytest.raises(KeyedError) as e:
        bench_plan(BenchmarkConfig(type=kind, isl=1, osl=1, concurrencies=1))
    assert e.value.key == "benchmark.type" and TYPES[kind][1] in e.value.message


@pytest.mark.parametrize("kind", ["manual", "none"])
def test_types_that_drive_no_load_run_nothing(kind):
    assert bench_plan(BenchmarkConfig(type=kind)) is None


@pytest.mark.parametrize("fields, key", [
    ({"osl": None}, "benchmark.osl"), ({"isl": 0}, "benchmark.isl"), ({"req_rate": "fast"}, "benchmark.req_rate"),
    ({"req_rate": 0}, "benchmark.req_rate"), ({"num_prompts_mult": 100000}, "benchmark.num_prompts_mult"),
    ({"dataset_name": "sharegpt"}, "benchmark.dataset_name"), ({"custom_tokenizer": "x.Y"}, "benchmark.custom_tokenizer"),
])
def test_bad_parameters_are_located(fields, key):
    with pytest.raises(KeyedError) as e:
        bench_plan(BenchmarkConfig(**{"type": "sa-bench", "isl": 8, "osl": 8, "concurrencies": 1, **fields}))
    assert e.value.key == key


def test_unknown_type_is_refused_naming_the_known_ones():
    how, why = handling("sa-bench2")
    assert how == "refused" and "sa-bench" in why


def test_validate_refuses_an_accuracy_type_only_when_asked_to_run_it():
    # srtctl files always carry a benchmark section: without reconcile.benchmark it is carried as before
    loaded = _load("{type: gsm8k}", policy="")
    assert "benchmark" in loaded.not_acted_on
    with pytest.raises(RecipeError) as e:
        _load("{type: gsm8k}")
    assert "benchmark.type" in str(e.value) and "accuracy" in str(e.value)
    ran = _load("{type: sa-bench, isl: 8, osl: 8, concurrencies: 2}")
    assert "benchmark" not in ran.not_acted_on and ran.recipe.reconcile.benchmark.on == ["ready"]


@pytest.mark.parametrize("policy", [", benchmark: {every: 10s}", ", benchmark: {every: 31d}", ", benchmark: {on: [boot]}",
                                    ", benchmark: {max_error_rate: 2}", ", benchmark: {timeout_seconds: 1}"])
def test_the_policy_is_bounded(policy):
    with pytest.raises(RecipeError):
        _load("{type: sa-bench, isl: 8, osl: 8, concurrencies: 2}", policy=policy)


def test_the_docs_list_how_every_type_is_handled():
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[1] / "docs" / "recipes.md").read_text()
    for kind, (how, why) in TYPES.items():
        assert f"| `{kind}` |" in doc and why in doc, f"docs/recipes.md does not say how {kind} is handled"
