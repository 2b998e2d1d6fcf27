"""state/ is a cache: a corrupt or wrongly typed file is set aside, never a reason to stop."""

from __future__ import annotations

import json

import pytest

from reconciler.drivers.local import LocalDriver
from reconciler.shell.loop import Controller
from reconciler.drivers.state import StateDir

CORRUPT = [
    ("r/status.json", "{not json", "status", {}),
    ("r/status.json", "[]", "status", {}),
    ("r/status.json", '{"conditions": "x"}', "status", {}),
    ("r/status.json", b"\xff\xfe\x00", "status", {}),
    ("r/launches.json", '["agg_0"]', "launches", {}),
    ("r/launches.json", '{"agg_0": {"launches": "many"}}', "launches", {}),
    ("r/launches.json", '{"agg_0": [1]}', "launches", {}),
    ("files.json", "[1, 2]", "files", {}),
    ("files.json", '{"a.yaml": 3}', "files", {}),
]


@pytest.mark.parametrize("rel, content, what, default", CORRUPT, ids=[f"{c[0]}:{c[1]!r}"[:40] for c in CORRUPT])
def test_a_corrupt_state_file_is_moved_aside_with_an_event(tmp_path, rel, content, what, default):
    path = tmp_path / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    ro = StateDir(tmp_path, read_only=True)
    read = {"status": lambda s: s.status("r"), "launches": lambda s: s.launches("r"), "files": lambda s: s.files()}[what]
    assert read(ro) == default and path.exists()  # get / plan: treated as missing, left where it is
    assert not (tmp_path / "events.jsonl").exists()
    sd = StateDir(tmp_path)
    assert read(sd) == default
    assert not path.exists()
    (aside,) = path.parent.glob(path.name + ".corrupt-*")
    assert aside.read_bytes() == (content if isinstance(content, bytes) else content.encode())
    (ev,) = [json.loads(l) for l in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert ev["kind"] == "CorruptState" and rel in ev["message"]


def test_a_directory_where_a_state_file_belongs_is_set_aside(tmp_path):
    (tmp_path / "r" / "status.json").mkdir(parents=True)
    assert StateDir(tmp_path).status("r") == {}
    assert list((tmp_path / "r").glob("status.json.corrupt-*"))


@pytest.mark.parametrize("content", ["{garbage", "[]", '{"nodes": [1]}', '{"base": "x"}'])
def test_a_corrupt_port_registry_is_relearnt_from_the_launch_records(tmp_path, content):
    st = tmp_path / "state"
    (st / "r").mkdir(parents=True)
    (st / "r" / "status.json").write_text(json.dumps({"workers": [{"name": "agg_1", "nodes": ["n1"],
                                                                   "ports": {"http": 20043}}]}))
    (st / "r" / "launches.json").write_text(json.dumps({"agg_0": {"launches": 1, "ports": {"n1": {"http": 20042}}}}))
    (st / "ports.json").write_text(content)
    c = Controller(tmp_path / "m", st, LocalDriver(st))
    assert c.ports.lookup("n1", "r/agg_0", "http") == 20042
    assert c.ports.lookup("n1", "r/agg_1", "http") == 20043
    assert list(st.glob("ports.json.corrupt-*"))


def test_state_files_are_the_reconcilers_users_alone(tmp_path):
    """Once 0644 for operators to read; state/ holds recipes' secrets, so 0600 (issue 48, item 5)."""
    sd = StateDir(tmp_path)
    sd.write_status("r", {"phase": "Ready"})
    assert (tmp_path / "r" / "status.json").stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize("content", [b"{not json", b"[1, 2]", b'{"1": "x"}', b"\xff\xfe", b'{"1": {"name": 5}}'])
def test_local_driver_records_corrupt_are_moved_aside_on_write_never_on_observe(tmp_path, content):
    from reconciler.drivers.local import LocalDriver
    from reconciler.world import AllocSpec

    d = LocalDriver(tmp_path, owner="me")
    d.dir.mkdir(parents=True)
    f = d.dir / "allocs.json"
    f.write_bytes(content)
    assert d.observe()[0] == []  # read as empty ...
    assert f.read_bytes() == content  # ... and observing (get, plan) writes nothing
    job = d.submit(AllocSpec("r", 0, 0, 1, 0))
    assert [a.job_id for a in d.observe()[0]] == [job]
    asides = list(d.dir.glob("allocs.json.corrupt-*"))
    assert len(asides) == 1 and asides[0].read_bytes() == content
    events = [json.loads(l) for l in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert any(e["kind"] == "CorruptState" and "allocs.json" in e["message"] for e in events)
