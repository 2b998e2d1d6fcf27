"""Recipe loading: schema 2, v1 normalisation, and located errors (table tests)."""

from __future__ import annotations

import textwrap

import pytest

from reconciler.errors import RecipeError
from reconciler.desired.admission import load_text

BASE = """\
schema: 2
name: demo
model: {path: /models/m}
resources: {gpus_per_node: 8}
engine: mocker
roles:
  agg:
    workers: 2
    gpus: 1
"""


def load(text: str, path: str = "demo.yaml"):
    return load_text(textwrap.dedent(text), path)


def test_minimal_schema2_recipe():
    lr = load(BASE)
    r = lr.recipe
    assert r.name == "demo"
    assert r.serving_engine.type == "mocker"
    assert r.roles.agg.workers == 2
    assert r.frontend.type == "dynamo"  # srtctl's default when absent
    lay = r.role_layouts()["agg"]
    assert (lay.nodes, lay.workers, lay.gpus) == (1, 2, 1)


@pytest.mark.parametrize(
    "mutation, key, line, fragment",
    [
        (("    workers: 2", "    workerz: 2"), "roles.agg.workerz", 8, "did you mean 'workers'"),
        (("    workers: 2", "    workers: two"), "roles.agg.workers", 8, "valid integer"),
        (("    gpus: 1", "    gpus: 0"), "roles.agg.gpus", 9, "greater than or equal to 1"),
        (("engine: mocker", "engine: {type: mocker, speedup: 2}"), "engine.speedup", 5, "did you mean 'speedup_ratio'"),
        (("engine: mocker", "engine: banana"), "engine", 5, "unknown engine type 'banana': expected sglang, vllm"),
        (("engine: mocker", "engine: {type: banana, speed: 1}"), "engine", 5, "unknown engine type 'banana'"),
        (("name: demo", "name: ../etc"), "name", 2, "letters, digits"),
        (("schema: 2", "schema: 3"), "schema", 1, "2"),
        (("model: {path: /models/m}", "model: {}"), "model.path", 3, "required key is missing"),
        (("resources: {gpus_per_node: 8}", "resources: {gpus_per_node: 8, colour: red}"), "resources.colour", 4, "unknown key"),
    ],
)
def test_rejections_name_key_and_line(mutation, key, line, fragment):
    old, new = mutation
    assert old in BASE
    with pytest.raises(RecipeError) as ei:
        load(BASE.replace(old, new))
    e = ei.value
    assert e.key == key, str(e)
    assert e.line == line, str(e)
    assert fragment in str(e)
    assert str(e).startswith(f"demo.yaml:{line}: {key}: ")


def test_yaml_syntax_error_has_line_and_column():
    with pytest.raises(RecipeError) as ei:
        load("name: x\nmodel: {path: m\nengine: mocker\n")
    assert ei.value.line == 3 and ei.value.column is not None
    assert "YAML syntax error" in str(ei.value)


def test_duplicate_keys_are_rejected():
    with pytest.raises(RecipeError) as ei:
        load(BASE + "engine: sglang\n")
    assert "duplicate key 'engine'" in str(ei.value)


@pytest.mark.parametrize("text, msg", [("", "empty file"), ("- a\n- b\n", "found a list"), ("just text\n", "found a string")])
def test_top_level_must_be_a_mapping(text, msg):
    with pytest.raises(RecipeError, match=msg):
        load(text)


def test_name_derived_from_file_name():
    lr = load(BASE.replace("name: demo\n", ""), "/x/my-recipe.yaml")
    assert lr.recipe.name == "my-recipe"
    with pytest.raises(RecipeError, match="not a valid recipe name"):
        load(BASE.replace("name: demo\n", ""), "/x/bad name!.yaml")


def test_names_as_long_as_srtctl_recipes_but_bounded():
    long = "gb200-fp4-dsr1-1k1k-ctx4-gen1-dep32-batch256-eplb0-mtp3-trtllm-disagg-70"
    assert load(BASE.replace("name: demo", "name: " + long)).recipe.name == long
    assert load(BASE.replace("name: demo", "name: " + "a" * 200)).recipe.name == "a" * 200
    with pytest.raises(RecipeError, match="1-200 characters"):
        load(BASE.replace("name: demo", "name: " + "a" * 201))


def test_env_numbers_become_text_but_mappings_do_not():
    lr = load(BASE + "    env: {PYTHONUNBUFFERED: 1, RATIO: 0.5}\n")
    assert lr.recipe.roles.agg.env == {"PYTHONUNBUFFERED": "1", "RATIO": "0.5"}
    with pytest.raises(RecipeError) as ei:
        load(BASE + "    env: {X: {a: 1}}\n")
    assert ei.value.key == "roles.agg.env.X"


def test_restart_shorthand_and_defaults():
    r = load(BASE).recipe
    assert r.roles.agg.restart.policy == "always"  # a reconciler serves
    assert r.roles.agg.restart.backoff_seconds == 10
    r = load(BASE + "    restart: on-failure\n").recipe
    assert r.roles.agg.restart.policy == "on-failure"


def test_reconcile_block_is_ours_and_strict():
    r = load(BASE + "reconcile: {suspend: true, rollout: {max_unavailable: 2}}\n").recipe
    assert r.reconcile.suspend and r.reconcile.rollout.max_unavailable == 2
    with pytest.raises(RecipeError) as ei:
        load(BASE + "reconcile: {pause: true}\n")
    assert ei.value.key == "reconcile.pause"


def test_topology_that_does_not_fit_is_located():
    with pytest.raises(RecipeError) as ei:
        load(BASE.replace("    gpus: 1", "    gpus: 6").replace("workers: 2", "workers: 2\n    nodes: 1"))
    assert ei.value.key == "roles.agg.workers"
    assert "do not fit" in str(ei.value)


def test_agg_and_disagg_cannot_mix():
    with pytest.raises(RecipeError, match="never both"):
        load(BASE + "  prefill: {workers: 1, gpus: 1}\n")


V1 = """\
name: v1demo
model: {path: /m, container: img.sqsh, precision: fp8}
resources:
  gpu_type: h100
  gpus_per_node: 8
  prefill_nodes: 1
  prefill_workers: 2
  decode_nodes: 0
  decode_workers: 1
  gpus_per_prefill: 2
  gpus_per_decode: 4
backend:
  prefill_environment: {A: "1"}
  decode_environment: {B: "2"}
  sglang_config:
    prefill: {tensor-parallel-size: 2}
    decode: {tensor-parallel-size: 4}
    aggregated: {tensor-parallel-size: 8}
frontend: {type: sglang}
"""


def test_v1_layout_is_normalised():
    lr = load(V1)
    r = lr.recipe
    assert lr.layout == "v1"
    assert r.serving_engine.type == "sglang"  # inferred from sglang_config
    assert r.roles.prefill.workers == 2 and r.roles.prefill.gpus == 2
    assert r.roles.decode.nodes == "colocate"  # decode_nodes: 0
    assert r.roles.prefill.env == {"A": "1"} and r.roles.decode.args == {"tensor-parallel-size": 4}
    assert r.roles.agg is None
    assert r.frontend.type == "sglang-router"
    assert any("aggregated ignored" in n for n in lr.notes)


def test_v1_errors_name_the_v1_key():
    with pytest.raises(RecipeError) as ei:
        load(V1.replace("prefill_workers: 2", "prefill_workers: many"))
    assert ei.value.key == "resources.prefill_workers"
    assert ei.value.line == 7
    with pytest.raises(RecipeError) as ei:
        load(V1.replace("decode_environment: {B: \"2\"}", "decode_environment: {B: [1]}"))
    assert ei.value.key == "backend.decode_environment.B"


def test_v1_and_schema2_cannot_mix():
    with pytest.raises(RecipeError, match="mixes the v1 layout"):
        load(V1 + "roles: {agg: {workers: 1}}\n")


def test_sweep_and_override_files_load_as_one_recipe_per_deployment():
    from reconciler.desired.admission import load_all

    sweep = load_all(BASE.replace("workers: 2", "workers: '{w}'") + "sweep: {w: [1, 2]}\n", "s.yaml")
    assert [(lr.recipe.name, lr.recipe.roles.agg.workers, lr.variant_of) for lr in sweep] == [
        ("demo_w1", 1, "s.yaml"), ("demo_w2", 2, "s.yaml")]
    # what last-applied keeps is a plain recipe that loads on its own to the same spec
    assert load(sweep[1].text).recipe == sweep[1].recipe
    over = load_all("base:\n" + "".join("  " + l + "\n" for l in BASE.splitlines())
                    + "override_big: {roles: {agg: {workers: 3}}}\n", "o.yaml")
    assert [(lr.recipe.name, lr.recipe.roles.agg.workers) for lr in over] == [("demo_big", 3)]
    with pytest.raises(RecipeError, match="expands into 2 deployments"):
        load(BASE.replace("workers: 2", "workers: '{w}'") + "sweep: {w: [1, 2]}\n")


def test_every_bad_variant_of_a_file_is_reported_and_located():
    from reconciler.desired.admission import load_all

    with pytest.raises(RecipeError) as ei:
        load_all(BASE.replace("workers: 2", "workers: '{w}'") + "sweep: {w: [-1, 2, x]}\n", "s.yaml")
    assert [p.path for p in ei.value.problems()] == ["s.yaml [demo_w-1]", "s.yaml [demo_wx]"]
    assert all(p.key == "roles.agg.workers" and p.line for p in ei.value.problems())
    with pytest.raises(RecipeError) as ei:
        load_all(BASE + "sweep: {a: [1, 2, 3, 4, 5, 6, 7], b: [1, 2, 3, 4, 5, 6, 7], c: [1, 2, 3, 4, 5, 6]}\n",
                 "g.yaml")
    assert ei.value.key == "sweep" and "294 combinations" in ei.value.message


def test_srtctl_2_keys_are_accepted_and_reported_as_carried():
    lr = load(BASE.replace("resources: {gpus_per_node: 8}", "resources: {gpus_per_node: 8, spread_workers: true}")
              + "frontend: {type: builtin, nginx_session_affinity: true, nginx_session_affinity_header: X-S,\n"
              "  nginx_keepalive_timeout: 60s, worker_selection: {policy: kv}, numa_bind: true, ctx_router: {},\n"
              "  gen_router: {}, server_config_extra: {a: 1}, args: null, env: null}\n"
              "output: {record_launch_plan: true}\n")
    assert lr.layout == "v2" and lr.recipe.resources.spread_workers  # not mistaken for v1's <role>_workers
    for key in ("frontend.nginx_session_affinity", "frontend.worker_selection", "frontend.numa_bind",
                "frontend.server_config_extra", "output"):
        assert key in lr.not_acted_on, key
    assert lr.recipe.frontend.args == {} and lr.recipe.frontend.env == {}


def test_v1_keys_srtctl_moved_are_read_in_their_2_0_place():
    lr = load("name: v\nmodel: {path: /m}\nresources: {gpus_per_node: 8, agg_nodes: 1, agg_workers: 1}\n"
              "backend: {type: sglang}\nfrontend: {type: builtin, orchestrator_placement: head}\n"
              "benchmark: {type: manual, client_dedicated_node: true}\ndynamo: {cargo_patches: ['x = 1']}\n"
              "infra: {nats_max_payload_mb: 16}\n")
    assert lr.layout == "v1"
    assert lr.recipe.frontend.placement.node == "head"
    assert lr.recipe.benchmark.placement.node == "dedicated"
    assert lr.recipe.dynamo.source.patches == ["x = 1"]
    assert lr.recipe.infra.nats_max_payload_mb == 16


def test_home_and_relative_model_paths_become_absolute_paths_that_can_be_mounted(tmp_path):
    import os

    lr = load(BASE.replace("path: /models/m", "path: ./weights/m"), str(tmp_path / "r.yaml"))
    assert lr.recipe.model.path == str(tmp_path / "weights" / "m")
    lr = load(BASE.replace("path: /models/m", "path: ../w"), str(tmp_path / "sub" / "r.yaml"))
    assert lr.recipe.model.path == str(tmp_path / "w")
    lr = load(BASE.replace("path: /models/m", "path: ~/w"))
    assert lr.recipe.model.path == os.path.expanduser("~/w")
    assert load(BASE).recipe.model.path == "/models/m"
