"""Controller bookkeeping that needs no cluster: state/ recovery and manifest handling."""

from __future__ import annotations

import json

from reconciler.shell.loop import Controller
from reconciler.drivers.local import LocalDriver


def test_deleted_port_registry_is_relearnt_from_status(tmp_path):
    st = tmp_path / "state" / "r"
    st.mkdir(parents=True)
    (st / "status.json").write_text(json.dumps({"workers": [
        {"name": "agg_0", "nodes": ["n1"], "ports": {"http": 20042}},
        {"name": "agg_1", "nodes": ["n1"], "ports": {"http": 20043}},
    ]}))
    c = Controller(tmp_path / "manifests", tmp_path / "state", LocalDriver(tmp_path / "state"))
    assert c.ports.lookup("n1", "r/agg_0", "http") == 20042
    assert c.ports.allocate("n1", "r/agg_2", "http") not in (20042, 20043)


def test_invalid_file_keeps_last_applied_spec_and_duplicate_names_are_reported(tmp_path):
    m = tmp_path / "manifests"
    m.mkdir()
    good = "name: r\nmodel: {path: m}\nengine: mocker\nroles: {agg: {workers: 2, gpus: 1}}\n"
    (m / "r.yaml").write_text(good)
    c = Controller(m, tmp_path / "state", LocalDriver(tmp_path / "state"))
    first = c.load_manifests()
    c.state.write_last_applied("r", first.texts["r"])
    c.state.write_files(first.paths)
    (m / "r.yaml").write_text(good.replace("workers: 2", "workers: [2]"))
    again = c.load_manifests()
    assert again.recipes["r"].roles.agg.workers == 2  # the last good spec keeps running
    assert "roles.agg.workers" in again.invalid["r"]
    (m / "r.yaml").write_text(good)
    (m / "s.yaml").write_text(good.replace("workers: 2", "workers: 5"))  # same name: r
    dup = c.load_manifests()
    assert dup.recipes["r"].roles.agg.workers == 2  # the first file wins, the second is reported
    assert "also used by" in dup.invalid["r"]
    assert dup.files_seen == 2


SWEEP = """\
name: sw
model: {path: m}
engine: mocker
roles: {agg: {workers: '{w}', gpus: 1}}
sweep: {w: %s}
"""


def test_a_sweep_file_is_one_recipe_per_combination_and_its_edits_converge_the_set(tmp_path):
    m = tmp_path / "manifests"
    m.mkdir()
    (m / "sw.yaml").write_text(SWEEP % "[1, 2]")
    c = Controller(m, tmp_path / "state", LocalDriver(tmp_path / "state"))

    def apply():
        got = c.load_manifests()
        for name, text in got.texts.items():
            c.state.write_last_applied(name, text)
        c.state.write_files(got.paths)
        return got

    first = apply()
    assert {n: r.roles.agg.workers for n, r in first.recipes.items()} == {"sw_w1": 1, "sw_w2": 2}
    assert first.paths == {str(m / "sw.yaml"): ["sw_w1", "sw_w2"]}
    # a broken edit keeps every deployment of the file on its last spec, each reported
    (m / "sw.yaml").write_text(SWEEP % "[1, 2], extra: 1")
    broken = c.load_manifests()
    assert {n: r.roles.agg.workers for n, r in broken.recipes.items()} == {"sw_w1": 1, "sw_w2": 2}
    assert set(broken.invalid) == {"sw_w1", "sw_w2"} and "sweep.extra" in broken.invalid["sw_w1"]
    # a combination removed from the sweep is no longer desired (so it is torn down); one added appears
    (m / "sw.yaml").write_text(SWEEP % "[2, 3]")
    edited = apply()
    assert sorted(edited.recipes) == ["sw_w2", "sw_w3"] and not edited.invalid
    assert c.state.files() == {str(m / "sw.yaml"): ["sw_w2", "sw_w3"]}


def test_files_json_of_an_earlier_version_still_reads(tmp_path):
    from reconciler.state import StateDir

    st = StateDir(tmp_path)
    (tmp_path / "files.json").write_text(json.dumps({"/m/r.yaml": "r"}))
    assert st.files() == {"/m/r.yaml": ["r"]}


def test_one_controller_per_state_directory(tmp_path):
    import pytest

    from reconciler.errors import ReconcilerError

    a = Controller(tmp_path / "m", tmp_path / "state", LocalDriver(tmp_path / "state"))
    b = Controller(tmp_path / "m", tmp_path / "state", LocalDriver(tmp_path / "state"))
    a.lock()
    with pytest.raises(ReconcilerError, match="another reconciler"):
        b.lock()
