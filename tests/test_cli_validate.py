"""`reconciler validate` and `reconciler schema` as a user runs them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

from conftest import ROOT, write
from schema_check import problems as schema_problems


def run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "reconciler.cli", *args], capture_output=True, text=True, cwd=cwd)


def test_validate_examples_exit_0():
    r = run("validate", "examples/")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("valid") >= 2


def test_validate_bad_files_exit_1_with_key_or_line(tmp_path):
    write(tmp_path, "unknown.yaml", "name: a\nmodel: {path: m}\nengine: mocker\nroles: {agg: {workers: 1, gpus: 1, colour: red}}\n")
    write(tmp_path, "type.yaml", "name: b\nmodel: {path: m}\nengine: mocker\nroles: {agg: {workers: lots, gpus: 1}}\n")
    write(tmp_path, "broken.yaml", "name: c\nmodel: [\n")
    r = run("validate", str(tmp_path))
    assert r.returncode == 1
    out = r.stdout
    assert "roles.agg.colour" in out and "unknown key 'colour'" in out
    assert "roles.agg.workers" in out
    assert "broken.yaml:3:" in out and "YAML syntax error" in out
    assert "Traceback" not in out + r.stderr


def test_validate_json_output(tmp_path):
    good = ROOT / "examples" / "mocker-agg.yaml"
    bad = write(tmp_path, "bad.yaml", "name: b\n")
    r = run("validate", "-o", "json", str(good), str(bad))
    assert r.returncode == 1
    data = json.loads(r.stdout)
    assert [d["valid"] for d in data] == [True, False]
    assert all({"path", "valid", "error"} <= set(d) for d in data)
    assert data[0]["error"] is None and "model" in data[1]["error"]


def test_validate_missing_path_is_an_error_not_a_traceback(tmp_path):
    r = run("validate", str(tmp_path / "nope.yaml"))
    assert r.returncode == 1
    assert "cannot read" in r.stdout and "Traceback" not in r.stderr


def test_validate_verbose_lists_keys_not_acted_on(corpus):
    f = corpus / "srt-slurm-v1" / "mocker" / "kimi-trace-agg.yaml"
    r = run("validate", "-v", str(f))
    assert r.returncode == 0, r.stdout
    assert "carried, not acted on:" in r.stdout
    for key in ("benchmark", "identity"):
        assert f"  {key}: srtctl section: validated, not acted on" in r.stdout
    assert "extra_mount:" not in r.stdout  # dynamo.mocker runs in the recipe's container: mounted
    assert "v1 layout normalised" in r.stdout


def test_schema_is_json_schema_that_describes_recipes():
    r = run("schema")
    assert r.returncode == 0
    s = json.loads(r.stdout)
    assert s["$schema"].startswith("https://json-schema.org/")
    assert s["additionalProperties"] is False
    assert {"name", "model", "roles", "engine", "reconcile"} <= set(s["properties"])
    assert "MockerEngine" in s["$defs"]
    # it describes recipes: the project's own examples validate against it, with nothing left over
    examples = sorted((ROOT / "examples").glob("*.yaml"))
    assert examples
    for f in examples:
        assert schema_problems(yaml.safe_load(f.read_text()), s) == [], f
    good = {"name": "g", "model": {"path": "/m"}, "engine": {"type": "mocker", "speedup_ratio": 10},
            "resources": {"gpus_per_node": 8}, "roles": {"prefill": {"workers": 1, "gpus": 1},
                                                         "decode": {"workers": 2, "gpus": 1}},
            "frontend": {"type": "builtin"}, "reconcile": {"rollout": {"max_surge": 1}}}
    assert schema_problems(good, s) == []
    # and refuses what the reconciler refuses: an unknown key, a wrong type, a count out of range
    assert any("unknown key 'bogus'" in p for p in schema_problems({**good, "bogus": 1}, s))
    assert any("$.resources.gpus_per_node" in p for p in
               schema_problems({**good, "resources": {"gpus_per_node": "eight"}}, s))
    assert any("$.roles.decode.workers" in p for p in
               schema_problems({**good, "roles": {"decode": {"workers": -1, "gpus": 1}}}, s))


def test_every_problem_of_a_file_is_listed_with_its_key_and_line(tmp_path):
    bad = write(tmp_path, "multi.yaml", "name: multi\nmodel: {path: /m}\nengine: {type: sglang, bogus: 1}\n"
                "roles: {agg: {workers: x, gpus: 1, wat: 2}}\nfrontend: {tpye: dynamo}\n")
    r = run("validate", str(bad))
    assert r.returncode == 1
    assert "(1 of 4 problems)" in r.stdout and "more problem" not in r.stdout
    for key in ("engine.bogus", "roles.agg.workers", "roles.agg.wat", "frontend.tpye"):
        assert f": {key}: " in r.stdout, key
    assert f"{bad}:5: frontend.tpye: unknown key 'tpye' (did you mean 'type'?)" in r.stdout
    data = json.loads(run("validate", "-o", "json", str(bad)).stdout)[0]
    assert [(p["key"], p["line"]) for p in data["problems"]] == [
        ("engine.bogus", 3), ("roles.agg.workers", 4), ("roles.agg.wat", 4), ("frontend.tpye", 5)]


def test_a_whole_recipe_repository_validates_per_file_with_a_documented_exit_status(tmp_path, corpus):
    """Issue 33: a checkout of a recipe collection as one manifests tree. Names repeated across
    folders are two deployments (exit 0); the same name twice in one folder is `ignored` (run keeps
    the first file), said apart from a file wrong in itself: a warning (exit 0), an error only with
    --strict; a file wrong in itself is exit 1 (docs/recipes.md)."""
    recipe = "name: {n}\nmodel: {{path: m}}\nengine: mocker\nroles: {{agg: {{workers: 1, gpus: 1}}}}\n"
    for folder in ("gb200/1k1k", "gb300/1k1k"):
        (tmp_path / "repo" / folder).mkdir(parents=True)
        write(tmp_path / "repo" / folder, "low-latency.yaml", recipe.format(n="low-latency"))
    r = run("validate", str(tmp_path / "repo"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert sorted(line.split("(")[1].split(":")[0] for line in r.stdout.splitlines()) == [
        "gb200/1k1k/low-latency", "gb300/1k1k/low-latency"]
    write(tmp_path / "repo" / "gb200/1k1k", "other.yaml", recipe.format(n="low-latency"))  # sorts after
    r = run("validate", str(tmp_path / "repo"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert run("validate", "--strict", str(tmp_path / "repo")).returncode == 1
    ignored = [line for line in r.stdout.splitlines() if line.startswith("ignored")]
    assert len(ignored) == 1 and "other.yaml" in ignored[0] and "gb200/1k1k/low-latency" in ignored[0], r.stdout
    assert "2 valid, 0 invalid, 1 ignored" in r.stderr, r.stderr

    r = run("validate", str(corpus), "-o", "json")
    assert r.returncode == 1
    results = json.loads(r.stdout)
    dup = [x for x in results if x.get("duplicate")]
    bad = [x for x in results if not x["valid"] and not x.get("duplicate")]
    assert len(dup) == 21 and all(Path(x["error"].split("also used by ")[1].split(";")[0]).parent
                                  == Path(x["path"]).parent for x in dup)
    # the deliberate refusals, each an unsupported feature named at its key
    assert len(bad) == 4 and all(x["unsupported"] and x["key"] for x in bad), bad
    assert sum(x["valid"] for x in results) == 685
    # NVIDIA's recipe collection (v1, one folder per model and GPU) as one manifests tree: accepted
    r = run("validate", str(corpus / "srt-slurm-v1"))
    assert r.returncode == 0 and ", 0 invalid, 21 ignored" in r.stderr, r.stderr


def test_validate_the_repos_manifests_dir_as_the_readme_writes_it():
    """A fresh clone: `reconciler validate manifests/` (README's first command) finds the shipped,
    recipe-less directory and says there is nothing to validate; its README.md is no recipe."""
    assert (ROOT / "manifests" / "README.md").is_file()
    r = run("validate", "manifests/")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "cannot read" not in r.stdout + r.stderr and "README" not in r.stdout
    assert "nothing to validate" in r.stderr
    assert json.loads(run("validate", "-o", "json", "manifests/").stdout) == []


def test_validate_a_missing_directory_still_fails(tmp_path):
    r = run("validate", str(tmp_path / "nope") + "/")
    assert r.returncode == 1 and "cannot read" in r.stdout, r.stdout + r.stderr
