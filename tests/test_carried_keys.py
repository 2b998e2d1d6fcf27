"""Nothing a recipe sets is dropped without a word: each key is acted on, rejected,
or listed as carried with why (the table below), by validate and by render."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from reconciler.backends import BACKENDS
from reconciler.recipe.engines import ENGINES, engine_list_text
from reconciler.errors import RecipeError
from reconciler.desired.admission import load_text
from reconciler.recipe.schema import recipe_json_schema
from reconciler.recipe.v1 import ENGINE_CONFIG_KEYS

ROOT = Path(__file__).resolve().parents[1]

BASE = """\
name: c
model: {{path: /m}}
resources: {{gpus_per_node: 8}}
frontend: {{type: builtin}}
engine: {{type: {engine}{knobs}}}
roles:
  agg: {{workers: 1, gpus: 2{role}}}
"""


def carried(engine: str, knobs: str = "", role: str = "") -> dict[str, str]:
    return load_text(BASE.format(engine=engine, knobs=knobs, role=role), "c.yaml").not_acted_on


CASES = [
    # engine, engine knobs, role keys, keys expected carried
    ("vllm", "", "", set()),
    ("vllm", ", set_visible_devices: true", "", set()),  # acted on: env mask instead of --device-ids
    ("vllm", ", dp_launch_mode: per_gpu", "", {"engine.dp_launch_mode"}),
    ("vllm", ", dp_launch_mode: per_node", "", set()),  # the default, acted on
    ("vllm", ", allow_prefill_decode_colocation: true", "", set()),  # acted on: tests/test_topology.py
    ("vllm", ", allow_prefill_decode_colocation_across_nodes: true", "",
     {"engine.allow_prefill_decode_colocation_across_nodes"}),
    ("vllm", "", ", extra_args: [--x]", {"roles.agg.extra_args"}),
    ("trtllm", ", sequential_node_start: 2", "", {"engine.sequential_node_start"}),
    ("trtllm", ", numa_memory_bind: local, numa_cpu_bind: true", "", {"engine.numa_memory_bind", "engine.numa_cpu_bind"}),
    ("trtllm", "", ", extra_args: [--x]", set()),  # trtllm-serve reads them
    ("sglang", ", gpu_type: b200", "", {"engine.gpu_type"}),
    ("sglang", "", ", extra_args: [--x]", {"roles.agg.extra_args"}),
    ("mocker", "", ", extra_args: [--x]", {"roles.agg.extra_args"}),
    ("mocker", "", ", kv_events: true, sidecar: true, critical: false", {"roles.agg.kv_events", "roles.agg.sidecar",
                                                                         "roles.agg.critical"}),
]


@pytest.mark.parametrize("engine, knobs, role, expected", CASES)
def test_carried_table(engine, knobs, role, expected):
    got = carried(engine, knobs, role)
    assert set(got) == expected
    assert all(got[k] for k in got)  # every entry says why


def test_trtllm_extra_args_behind_dynamo_are_carried_not_rendered():
    text = BASE.format(engine="trtllm", knobs="", role=", extra_args: [--x]").replace("builtin", "dynamo")
    lr = load_text(text, "c.yaml")
    assert "roles.agg.extra_args" in lr.not_acted_on
    assert "frontend.type" not in lr.not_acted_on  # the Dynamo frontend is started


def test_sections_and_nested_keys_and_v1_paths():
    text = """\
name: v
model: {path: /m, precision: fp8}
resources: {gpu_type: h100, gpus_per_node: 8, agg_nodes: 1, agg_workers: 1}
backend: {type: sglang, gpu_type: h100}
frontend: {type: builtin}
benchmark: {type: manual}
"""
    got = load_text(text, "v.yaml").not_acted_on
    assert {"benchmark", "model.precision", "resources.gpu_type", "backend.gpu_type"} <= set(got)
    assert got["benchmark"] == "srtctl section: validated, not acted on"


def test_mocker_role_model_name_is_kept():
    text = BASE.format(engine="mocker", knobs="", role=", args: {model-name: my-model}")
    lr = load_text(text, "c.yaml")
    from reconciler.desired.render import as_rows, render_units

    (row, *_) = [r for r in as_rows(render_units(lr.recipe, None, ROOT / "state")) if r["role"] == "agg"]
    argv = row["argv"]
    assert argv[argv.index("--model-name") + 1] == "my-model"
    assert argv.count("--model-name") == 1
    assert "roles.agg.args" not in lr.not_acted_on


def run(*args):
    return subprocess.run([sys.executable, "-m", "reconciler.cli", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)


def test_validate_and_render_report_them(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text(BASE.format(engine="vllm", knobs=", dp_launch_mode: per_gpu", role=""))
    r = run("validate", str(f))
    assert r.returncode == 0 and "carried, not acted on: engine.dp_launch_mode" in r.stdout
    r = run("validate", "-o", "json", str(f))
    assert "engine.dp_launch_mode" in json.loads(r.stdout)[0]["not_acted_on"]
    r = run("render", str(f), "--state", str(tmp_path / "state"))
    assert r.returncode == 0 and "engine.dp_launch_mode: per_gpu (deprecated" in r.stdout
    r = run("render", str(f), "-o", "json", "--state", str(tmp_path / "state"))
    assert "engine.dp_launch_mode" in json.loads(r.stdout)["not_acted_on"]


# ---------------------------------------------------------------- the registry


def test_everything_that_lists_engines_reads_the_registry():
    names = list(ENGINES)
    assert recipe_json_schema()["properties"]["engine"]["anyOf"][0]["enum"] == names
    assert sorted(ENGINE_CONFIG_KEYS.values()) == sorted(names)
    docs = (ROOT / "docs" / "backends.md").read_text()
    for name, cls in BACKENDS.items():
        assert f"`{Path(sys.modules[cls.__module__].__file__).name}`" in docs, name
    with pytest.raises(RecipeError) as e:
        load_text(BASE.format(engine="nosuch", knobs="", role=""), "c.yaml")
    assert engine_list_text("or") in str(e.value)


def test_every_backend_hook_has_a_caller():
    """The contract holds only hooks the reconciler calls (docs/backends.md lists them)."""
    import inspect

    from reconciler.backends.base import Backend

    hooks = [n for n, _ in inspect.getmembers(Backend) if not n.startswith("_") and n not in ("bind", "recipe", "type", "memo")]
    # callers: everything but the engines themselves (the registry binds them, so it is a caller)
    sources = "".join(p.read_text() for p in (ROOT / "reconciler").rglob("*.py")
                      if "backends" not in p.parts or p.name == "registry.py")
    base = (ROOT / "reconciler" / "backends" / "base.py").read_text()
    docs = (ROOT / "docs" / "backends.md").read_text()
    for h in hooks:
        called = f".{h}" in sources or f"self.{h}" in base.replace(f"def {h}(self", "")
        assert called, f"Backend.{h} is never called"
        assert f"`{h}" in docs, f"Backend.{h} is not in docs/backends.md"
