"""Sweep files and base/override files expand into the recipes srtctl would submit."""

from __future__ import annotations

import copy
import math

import pytest

from reconciler.errors import RecipeError
from reconciler.recipe.load import parse_yaml
from reconciler.recipe.variants import expand, is_variant_file

P = "manifests/demo.yaml"


def names(data: dict, path: str = P) -> list[str]:
    return [n for n, _ in expand(data, path)]


def only(data: dict) -> dict:
    (_, recipe), = expand(data, P)
    return recipe


# --- detection ---------------------------------------------------------------------------------

@pytest.mark.parametrize("data, expected", [
    ({"name": "a", "sweep": {"x": [1]}}, True),
    ({"base": {"name": "a"}, "override_b": {}}, True),
    ({"base": {"name": "a"}}, True),
    ({"name": "a", "zip_override_b": {"x": [1]}}, True),
    ({"name": "a", "override_b": {}}, True),
    ({"name": "a", "engine": "sglang"}, False),
    ({"name": "a", "benchmark": {"sweep": {"mode": "zip"}}}, False),  # only the top level counts
    ([1, 2], False), (None, False), ("sweep", False), ({1: "x"}, False),
])
def test_is_variant_file(data, expected):
    assert is_variant_file(data) is expected


def test_expand_refuses_a_plain_recipe():
    with pytest.raises(ValueError):
        expand({"name": "a"}, P)


# --- sweep: combinations, order, names ------------------------------------------------------------

@pytest.mark.parametrize("sweep, expected", [
    ({"c": [4, 8]}, ["j_c4", "j_c8"]),
    # grid: the first parameter varies slowest (itertools.product)
    ({"a": [1, 2], "b": ["x", "y"]}, ["j_a1_bx", "j_a1_by", "j_a2_bx", "j_a2_by"]),
    ({"mem": [0.85, 0.9], "on": [True]}, ["j_mem0.85_onTrue", "j_mem0.9_onTrue"]),
    # zip: the i-th values together, explicit form or `mode:` beside the parameters
    ({"mode": "zip", "parameters": {"a": [1, 2], "b": [3, 4]}}, ["j_a1_b3", "j_a2_b4"]),
    ({"mode": "zip", "a": [1, 2], "b": [3, 4]}, ["j_a1_b3", "j_a2_b4"]),
    ({"mode": "grid", "parameters": {"a": [1, 2], "b": [3]}}, ["j_a1_b3", "j_a2_b3"]),
    ({"mode": [1, 2]}, ["j_mode1", "j_mode2"]),  # a list-valued `mode` is just a parameter
])
def test_sweep_combinations_in_srtctl_order(sweep, expected):
    assert names({"name": "j", "sweep": sweep}) == expected


def test_sweep_key_is_removed_and_name_set():
    for name, recipe in expand({"name": "j", "engine": "sglang", "sweep": {"c": [1, 2]}}, P):
        assert "sweep" not in recipe and recipe["name"] == name and recipe["engine"] == "sglang"


@pytest.mark.parametrize("data, expected", [
    ({"sweep": {"c": [1]}}, ["demo_c1"]),  # no name: the file name, as load.py names a plain recipe
    ({"name": "run-{c}", "sweep": {"c": [1]}}, ["run-{c}_c1"]),  # srtctl names from the name as written
])
def test_sweep_base_name(data, expected):
    assert names(data) == expected


# --- sweep: placeholder substitution -------------------------------------------------------------

@pytest.mark.parametrize("template, value, expected", [
    ("{p}", 4, 4),                       # whole value keeps its type
    ("{p}", 0.85, 0.85),
    ("{p}", True, True),
    ("{p}", [4, 8], [4, 8]),
    ("{p}", {"k": 1}, {"k": 1}),
    ("{p}", "txt", "txt"),
    ("run-{p}", 4, "run-4"),             # inside a string: formatted as text
    ("{p}x{p}", 4, "4x4"),
    ("on={p}", True, "on=True"),
    ("c={p}", [4, 8], "c=4,8"),          # a list inside a string is joined with ","
    ("donor-{node}-{p}", 1, "donor-{node}-1"),  # an embedded unknown template stays (runtime placeholder)
    ("${HOME}/{p}", 1, "${HOME}/1"),
    ('{"a": 1}', 1, '{"a": 1}'),         # JSON is not a placeholder
    (7, 1, 7),
    (None, 1, None),
])
def test_placeholder_substitution(template, value, expected):
    recipe = only({"name": "j", "field": template, "sweep": {"p": [value]}})
    assert recipe["field"] == expected and type(recipe["field"]) is type(expected)


def test_placeholders_in_nested_lists_and_dicts_but_not_keys():
    recipe = only({"name": "j", "sweep": {"c": [16]},
                   "roles": {"agg": {"args": {"max-running-requests": "{c}", "{c}": "k"}}},
                   "benchmark": {"concurrencies": ["{c}", 32]}})
    assert recipe["benchmark"]["concurrencies"] == [16, 32]
    assert recipe["roles"]["agg"]["args"] == {"max-running-requests": 16, "{c}": "k"}


def test_swept_values_are_not_shared_between_jobs():
    out = expand({"name": "j", "a": "{p}", "b": "{p}", "sweep": {"p": [[1]], "q": [1, 2]}}, P)
    out[0][1]["a"].append(9)
    assert out[0][1]["b"] == [1] and out[1][1]["a"] == [1]


# --- base + override_* ----------------------------------------------------------------------------

BASE = {
    "name": "my-job",
    "model": {"path": "m", "precision": "fp8"},
    "roles": {"decode": {"nodes": 1, "workers": 1, "args": {"mem": 0.8, "tp": 4}}},
    "benchmark": {"type": "sa-bench", "concurrencies": [4, 8]},
}


def test_override_deep_merge_rules():
    data = {"schema": 2, "base": BASE, "override_x": {
        "roles": {"decode": {"args": {"mem": 0.75, "new": True}}},   # nested dict: merged
        "benchmark": {"concurrencies": [16]},                         # list: replaced
        "model": {"precision": "bf16", "path": None},                 # scalar replaced, null deletes
        "extra": {"k": [1]},                                          # new key: added
    }}
    (name, r), = expand(data, P)
    assert name == r["name"] == "my-job_x"
    assert r["roles"]["decode"] == {"nodes": 1, "workers": 1, "args": {"mem": 0.75, "tp": 4, "new": True}}
    assert r["benchmark"] == {"type": "sa-bench", "concurrencies": [16]}
    assert r["model"] == {"precision": "bf16"}
    assert r["extra"] == {"k": [1]} and r["schema"] == 2
    assert not any(k == "base" or k.startswith(("override_", "zip_override_")) for k in r)


@pytest.mark.parametrize("data, expected", [
    # sorted override_* first, then sorted zip_override_*; base alone is not a deployment
    ({"base": BASE, "zip_override_a": {"roles": {"decode": {"nodes": [1, 2]}}},
      "override_lowmem": {}, "override_highconc": {}},
     ["my-job_highconc", "my-job_lowmem", "my-job_a_0", "my-job_a_1"]),
    ({"base": BASE, "override_maxtpt": {"name": "my-job-max-throughput"}}, ["my-job-max-throughput"]),
    ({"base": {k: v for k, v in BASE.items() if k != "name"}, "override_x": {}}, ["demo_x"]),
])
def test_override_names_and_order(data, expected):
    assert names(data) == expected


def test_zip_override_expands_lists():
    data = {"base": BASE, "zip_override_tp_sweep": {
        "roles": {"decode": {"args": {"tp": [4, 8, 16], "mem": [0.85], "trust": True}}},
        "benchmark": {"concurrencies": [[4, 8], [4, 8], [4]]},  # list of lists: a literal list each
    }}
    out = expand(data, P)
    assert [n for n, _ in out] == ["my-job_tp_sweep_0", "my-job_tp_sweep_1", "my-job_tp_sweep_2"]
    assert [r["roles"]["decode"]["args"] for _, r in out] == [
        {"mem": 0.85, "tp": t, "trust": True} for t in (4, 8, 16)]  # length 1 and scalars broadcast
    assert [r["benchmark"]["concurrencies"] for _, r in out] == [[4, 8], [4, 8], [4]]


@pytest.mark.parametrize("section, expected", [
    ({"name": ["a-tp4", "a-tp8"], "roles": {"decode": {"nodes": [1, 2]}}}, ["a-tp4", "a-tp8"]),
    ({"name": "same", "roles": {"decode": {"nodes": [1, 2]}}}, ["my-job_g_0", "my-job_g_1"]),  # scalar name
    ({"roles": {"decode": {"nodes": [1]}}}, ["my-job_g_0"]),
])
def test_zip_override_names(section, expected):
    assert names({"base": BASE, "zip_override_g": section}) == expected


def test_a_variant_with_sweep_is_swept():
    data = {"base": {**BASE, "sweep": {"c": [1, 2]}, "benchmark": {"concurrencies": ["{c}"]}},
            "override_a": {}, "override_b": {"name": "bee", "sweep": {"c": [3]}}}
    out = expand(data, P)
    assert [n for n, _ in out] == ["my-job_a_c1", "my-job_a_c2", "bee_c3"]
    assert [r["benchmark"]["concurrencies"] for _, r in out] == [[1], [2], [3]]
    assert all("sweep" not in r for _, r in out)


def test_input_is_never_mutated():
    data = {"base": {**BASE, "sweep": {"c": [1]}}, "override_x": {"model": {"path": None}},
            "zip_override_z": {"roles": {"decode": {"nodes": [1, 2]}}}}
    before = copy.deepcopy(data)
    for _, r in expand(data, P):
        r["roles"]["decode"]["args"]["mem"] = 0
    assert data == before


# --- errors, each with its key path ----------------------------------------------------------------

@pytest.mark.parametrize("data, key, fragment", [
    ({"name": "j", "sweep": {}}, "sweep", "empty sweep"),
    ({"name": "j", "sweep": [1, 2]}, "sweep", "expected a mapping"),
    ({"name": "j", "sweep": {"c": 4}}, "sweep.c", "non-empty list"),
    ({"name": "j", "sweep": {"c": []}}, "sweep.c", "empty list"),
    ({"name": "j", "sweep": {"mode": "random", "c": [1]}}, "sweep.mode", "'grid'"),
    ({"name": "j", "sweep": {"mode": "zip", "parameters": [1]}}, "sweep.parameters", "mapping"),
    ({"name": "j", "sweep": {"mode": "zip", "parameters": {}}}, "sweep.parameters", "empty sweep"),
    ({"name": "j", "sweep": {"mode": "zip", "a": [1, 2], "b": [1, 2, 3]}}, "sweep.b", "3 values, but 'a' has 2"),
    ({"name": "j", "sweep": {"mode": "zip", "parameters": {"a": [1], "b": [1, 2]}}},
     "sweep.parameters.b", "same number"),
    ({"name": "j", "roles": {"agg": {"args": {"x": "{conc}"}}}, "sweep": {"c": [1]}},
     "roles.agg.args.x", "names no sweep parameter; expected one of: c"),
    ({"name": "j", "benchmark": {"concurrencies": ["{cc}"]}, "sweep": {"c": [1]}}, "benchmark.concurrencies.0",
     "'{cc}'"),
    ({"name": "j", "sweep": {"c": [1, "1"]}}, "sweep", "produced twice"),
    ({"base": BASE}, "base", "at least one override_"),
    ({"base": [1], "override_x": {}}, "base", "expected a mapping"),
    ({"name": "j", "override_x": {}}, "override_x", "needs a base:"),
    ({"base": BASE, "override_x": None}, "override_x", "found nothing"),
    ({"base": BASE, "override_x": [1]}, "override_x", "found list"),
    ({"base": BASE, "override_x": {}, "engine": "sglang"}, "engine", "unknown top-level key"),
    ({"base": BASE, "override_x": {}, "sweep": {"c": [1]}}, "sweep", "inside base:"),
    ({"base": BASE, "override_": {}}, "override_", "variant name after"),
    ({"base": BASE, "override_x": {"name": None}}, "override_x.name", "string name"),
    ({"base": BASE, "override_a": {"name": "n"}, "override_b": {"name": "n"}}, "override_b", "produced twice"),
    ({"base": BASE, "zip_override_g": {"name": ["n"], "roles": {"decode": {"nodes": [1, 2]}}}},
     "zip_override_g", "produced twice"),
    ({"base": BASE, "zip_override_g": {"roles": {"decode": {"nodes": 2}}}}, "zip_override_g", "nothing to zip"),
    ({"base": BASE, "zip_override_g": {"roles": {"decode": {"nodes": []}}}},
     "zip_override_g.roles.decode.nodes", "empty list"),
    ({"base": BASE, "zip_override_g": {"roles": {"decode": {"nodes": [1, 2], "workers": [1, 2, 3]}}}},
     "zip_override_g.roles.decode.workers", "3 values, but zip_override_g.roles.decode.nodes has 2"),
    # a sweep inside a variant is located in the section that wrote it
    ({"base": {**BASE, "sweep": {"c": []}}, "override_x": {}}, "base.sweep.c", "empty list"),
    ({"base": BASE, "override_x": {"sweep": {"c": [1]}, "roles": {"decode": {"args": {"tp": "{t}"}}}}},
     "override_x.roles.decode.args.tp", "names no sweep parameter"),
    ({"base": {**BASE, "model": {"path": "{t}"}}, "override_x": {"sweep": {"c": [1]}}},
     "base.model.path", "names no sweep parameter"),
])
def test_errors_are_located(data, key, fragment):
    with pytest.raises(RecipeError) as info:
        expand(data, P)
    err = info.value
    assert (err.path, err.key) == (P, key), str(err)
    assert fragment in err.message, err.message


# --- the corpus -----------------------------------------------------------------------------------

def _sections(data: dict) -> int:
    return sum(1 for k in data if str(k).startswith(("override_", "zip_override_")))


def _jobs(data: dict) -> int | None:
    """How many jobs srtctl makes of the file, counted from its text where that is plain: a
    top-level sweep (every combination, or the zipped lists' length), or override_ sections
    without sweeps or zips of their own (one each). None: only "one per section at least" holds."""
    sweep = data.get("sweep")
    if isinstance(sweep, dict) and "base" not in data:
        params = sweep["parameters"] if "parameters" in sweep else {k: v for k, v in sweep.items() if k != "mode"}
        lengths = [len(v) for v in params.values()]
        return lengths[0] if sweep.get("mode") == "zip" else math.prod(lengths)
    sections = [v for k, v in data.items() if str(k).startswith(("override_", "zip_override_"))]
    if "base" in data and all(str(k).startswith("override_") or not str(k).startswith("zip_override_") for k in data) \
            and "sweep" not in data["base"] and not any(isinstance(v, dict) and "sweep" in v for v in sections):
        return len(sections)
    return None


def test_every_variant_file_in_the_corpus_expands(corpus):
    files = sorted(p for sub in ("srt-slurm-v1", "srt-slurm-v2") for p in (corpus / sub).rglob("*.yaml"))
    variant_files = 0
    for f in files:
        data = parse_yaml(f.read_text(), str(f))
        if not is_variant_file(data):
            continue
        variant_files += 1
        out = expand(data, str(f))
        assert len(out) == _jobs(data) if _jobs(data) else len(out) >= _sections(data), (f, [n for n, _ in out])
        assert len({name for name, _ in out}) == len(out), f"{f}: two variants share a name"
        for name, recipe in out:
            assert isinstance(name, str) and name and recipe["name"] == name, f
            assert not any(k in ("sweep", "base") or str(k).startswith(("override_", "zip_override_"))
                           for k in recipe), (f, name)
    assert variant_files >= 2  # at least features/sweep.yaml and features/override.yaml
