"""Folders are namespaces: identity is folder + name, and the top level is as it always was."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from reconciler import labels
from reconciler.recipe import namespaces
from reconciler.drivers.local import LocalDriver
from reconciler.shell.loop import Controller

GOOD = "name: {name}\nmodel: {{path: m}}\nengine: mocker\nroles: {{agg: {{workers: {w}, gpus: 1}}}}\nfrontend: {{type: none}}\n"


def test_keys_round_trip_and_the_top_level_key_is_the_name():
    assert namespaces.key("", "qwen") == "qwen"
    k = namespaces.key("dsv4/gb300", "agg")
    assert k == "dsv4@gb300@agg" and "/" not in k
    assert namespaces.split(k) == ("dsv4/gb300", "agg") and namespaces.split("qwen") == ("", "qwen")
    assert namespaces.display(k) == "dsv4/gb300/agg" and namespaces.from_ref("dsv4/gb300/agg") == k
    assert namespaces.from_ref("qwen") == "qwen"
    assert namespaces.is_key(k) and namespaces.is_key("qwen")
    assert not namespaces.is_key("../x") and not namespaces.is_key("a@..@b")


def test_a_folder_that_cannot_be_a_namespace_is_refused_with_its_name(tmp_path):
    with pytest.raises(namespaces.NamespaceError, match="'my models'"):
        namespaces.namespace_of_file(tmp_path, tmp_path / "my models" / "r.yaml")
    assert namespaces.namespace_of_file(tmp_path, tmp_path / "r.yaml") == ""
    assert namespaces.namespace_of_file(tmp_path, tmp_path / "a" / "b" / "r.yaml") == "a/b"


def test_top_level_labels_and_state_paths_are_unchanged():
    # what an earlier version wrote for a recipe at the top level is what this one reads: adopted, no relaunch
    assert labels.job_name("o1", "qwen", 0) == "rcl:o1:qwen:a0"
    assert labels.step_name("o1", "qwen", "agg", 0, 0, "abc") == "rcl:o1:qwen:agg:0:0:abc"


def test_namespaced_labels_parse_back_to_the_key():
    k = namespaces.key("teamA/h100", "qwen")
    job = labels.job_name("o1", k, 2)
    assert labels.parse_job(job, labels.job_comment("o1", k, 2, 0, 1), "o1").recipe == k
    step = labels.parse_step(labels.step_name("o1", k, "decode", 1, 0, "abc", 1), "o1", labels.tags([k]))
    assert (step.recipe, step.role, step.index, step.slot) == (k, "decode", 1, 1)
    long = namespaces.key("a" * 60 + "/b", "c" * 150)  # abbreviated in names, whole in the comment
    assert labels.parse_job(labels.job_name("o1", long, 0), labels.job_comment("o1", long, 0, 0, 1), "o1").recipe == long


def test_the_same_name_in_two_folders_is_two_deployments_and_the_top_level_keeps_its_key(tmp_path):
    m = tmp_path / "manifests"
    (m / "teamA").mkdir(parents=True)
    (m / "teamB" / "h100").mkdir(parents=True)
    (m / "qwen.yaml").write_text(GOOD.format(name="qwen", w=1))
    (m / "teamA" / "qwen.yaml").write_text(GOOD.format(name="qwen", w=2))
    (m / "teamB" / "h100" / "other-file.yaml").write_text(GOOD.format(name="qwen", w=3))
    c = Controller(m, tmp_path / "state", LocalDriver(tmp_path / "state"))
    got = c.load_manifests()
    assert not got.invalid
    assert {k: r.roles.agg.workers for k, r in got.recipes.items()} == {
        "qwen": 1, "teamA@qwen": 2, "teamB@h100@qwen": 3}
    assert got.recipes["teamA@qwen"].name == "teamA@qwen"  # its identity everywhere from here on


def test_the_same_name_twice_in_one_folder_keeps_the_first_file(tmp_path):
    m = tmp_path / "manifests"
    (m / "teamA").mkdir(parents=True)
    (m / "teamA" / "a.yaml").write_text(GOOD.format(name="qwen", w=1))
    (m / "teamA" / "b.yaml").write_text(GOOD.format(name="qwen", w=5))
    c = Controller(m, tmp_path / "state", LocalDriver(tmp_path / "state"))
    got = c.load_manifests()
    assert got.recipes["teamA@qwen"].roles.agg.workers == 1
    assert "also used by" in got.invalid["teamA@qwen"] and "b.yaml" in got.invalid["teamA@qwen"]


def test_a_broken_namespaced_file_keeps_its_last_spec_under_its_key(tmp_path):
    m = tmp_path / "manifests"
    (m / "teamA").mkdir(parents=True)
    f = m / "teamA" / "qwen.yaml"
    f.write_text(GOOD.format(name="qwen", w=2))
    c = Controller(m, tmp_path / "state", LocalDriver(tmp_path / "state"))
    first = c.load_manifests()
    c.state.write_last_applied("teamA@qwen", first.texts["teamA@qwen"])
    c.state.write_files(first.paths)
    f.write_text(GOOD.format(name="qwen", w="[2]"))
    again = c.load_manifests()
    assert again.recipes["teamA@qwen"].roles.agg.workers == 2 and again.recipes["teamA@qwen"].name == "teamA@qwen"
    assert "roles.agg.workers" in again.invalid["teamA@qwen"]


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "reconciler.cli", *args], capture_output=True, text=True,
                          timeout=120, cwd=cwd)


def test_get_has_a_namespace_column_and_takes_folder_slash_name(tmp_path):
    m = tmp_path / "manifests"
    (m / "teamA").mkdir(parents=True)
    (m / "qwen.yaml").write_text(GOOD.format(name="qwen", w=1))
    (m / "teamA" / "qwen.yaml").write_text(GOOD.format(name="qwen", w=2))
    common = ("--manifests", str(m), "--state", str(tmp_path / "state"), "--driver", "local")
    r = _cli("get", *common, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    head, *lines = [line for line in r.stdout.splitlines() if not line.startswith("controller:")]  # run's own line
    assert head.split()[:2] == ["NAMESPACE", "NAME"]
    assert sorted(tuple(line.split()[:2]) for line in lines) == [("-", "qwen"), ("teamA", "qwen")]
    r = _cli("get", "teamA/qwen", "-o", "json", *common, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    (row,) = json.loads(r.stdout)
    assert (row["namespace"], row["name"], row["roles"]["agg"]["desired"]) == ("teamA", "qwen", 2)
    r = _cli("get", "teamB/qwen", *common, cwd=tmp_path)
    assert r.returncode != 0 and "teamB/qwen" in r.stderr


def test_validate_accepts_a_whole_recipe_repository_with_names_repeated_across_folders(corpus):
    """../shared/corpus repeats recipe names in different folders: none of those is a clash now;
    what is still reported is the same name twice in one folder (run keeps the first file)."""
    r = _cli("validate", str(corpus), "-o", "json", cwd=corpus.parent)
    results = json.loads(r.stdout)
    spaced = {}
    for x in results:
        if x["valid"]:
            spaced.setdefault(x["name"], set()).add(x["namespace"])
    assert any(len(ns) > 1 for ns in spaced.values()), "the corpus should repeat a name across folders"
    clashes = [x for x in results if not x["valid"] and "also used by" in (x["error"] or "")]
    for x in clashes:
        other = x["error"].split("also used by ")[1].split(";")[0]
        assert Path(other).parent == Path(x["path"]).parent, x["error"]  # same folder only
    assert len(results) - sum(not x["valid"] for x in results) >= 685


def test_people_see_folder_slash_name_never_the_internal_key(tmp_path):
    """The key (teamA@qwen) names state/ directories and Slurm labels; plan, events, logs and run's
    own log lines say teamA/qwen, as the user wrote it (and as get, describe and events NAME take it)."""
    m = tmp_path / "manifests"
    (m / "teamA").mkdir(parents=True)
    (m / "teamA" / "qwen.yaml").write_text(GOOD.format(name="qwen", w=1))
    common = ("--manifests", str(m), "--state", str(tmp_path / "state"), "--driver", "local")
    key = namespaces.key("teamA", "qwen")
    outputs = []
    r = _cli("plan", *common, cwd=tmp_path)
    assert r.returncode == 2 and "submit allocation teamA/qwen/a0" in r.stdout, r.stdout + r.stderr
    outputs.append(r.stdout)
    r = _cli("plan", "-o", "json", *common, cwd=tmp_path)
    doc = json.loads(r.stdout)
    assert list(doc["recipes"]) == ["teamA/qwen"] and doc["recipes"]["teamA/qwen"]["key"] == key
    r = _cli("run", "--once", *common, cwd=tmp_path)  # one pass: it submits the allocation only
    assert r.returncode == 0, r.stderr
    outputs += [r.stdout, r.stderr]
    try:
        r = _cli("events", "teamA/qwen", "--state", str(tmp_path / "state"), cwd=tmp_path)
        assert r.returncode == 0 and "SubmitAlloc" in r.stdout, r.stdout + r.stderr
        assert all(line.split()[2] == "teamA/qwen" for line in r.stdout.splitlines()), r.stdout
        outputs.append(r.stdout)
        r = _cli("events", "-o", "json", "--state", str(tmp_path / "state"), cwd=tmp_path)
        evs = json.loads(r.stdout)
        assert evs and {(e["recipe"], e["key"]) for e in evs} == {("teamA/qwen", key)}
        r = _cli("logs", "teamA/qwen", "--state", str(tmp_path / "state"), cwd=tmp_path)
        assert r.returncode != 0 and "teamA/qwen" in r.stderr, r.stderr  # nothing launched yet: it says whose
        outputs.append(r.stderr)
        r = _cli("describe", "teamA/qwen", *common, cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        outputs.append(r.stdout)
        assert not [o for o in outputs if key in o], [o for o in outputs if key in o]
    finally:
        (m / "teamA" / "qwen.yaml").unlink()
        r = _cli("run", "--once", "--allow-empty", *common, cwd=tmp_path)
        assert r.returncode == 0 and key not in r.stdout + r.stderr, r.stdout + r.stderr
