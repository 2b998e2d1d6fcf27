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


def test_one_controller_per_state_directory(tmp_path):
    import pytest

    from reconciler.errors import ReconcilerError

    a = Controller(tmp_path / "m", tmp_path / "state", LocalDriver(tmp_path / "state"))
    b = Controller(tmp_path / "m", tmp_path / "state", LocalDriver(tmp_path / "state"))
    a.lock()
    with pytest.raises(ReconcilerError, match="another reconciler"):
        b.lock()
