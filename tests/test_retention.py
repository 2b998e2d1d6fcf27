"""state/ stays bounded (issue 48, item 8): events.jsonl rotates at a size (one older file kept), and
the directories of deleted recipes are removed after a retention (and beyond the most recent
deletions). A real state directory in tmp_path, a memory driver for the controller."""

from __future__ import annotations

import json
import os
import threading
import time

from reconciler.cli import operate
from reconciler.drivers.memory import MemoryDriver
from reconciler.drivers.retention import remove_expired, rotate
from reconciler.drivers.state import StateDir
from reconciler.shell.loop import Controller
from reconciler.timefmt import iso

RECIPE = "name: {name}\nmodel: {{path: m}}\nengine: mocker\nfrontend: {{type: none}}\nroles: {{agg: {{workers: 1, gpus: 1}}}}\n"


def test_events_rotate_at_their_size_and_read_back_in_order(tmp_path):
    state = StateDir(tmp_path)
    state.events_max = 4096
    for i in range(400):  # ~50 KB of events: twelve times the bound
        state.event("Said", "r", f"event number {i:04d}")
    live, older = tmp_path / "events.jsonl", tmp_path / "events.jsonl.1"
    assert older.exists(), "rotated"
    line = 200
    assert live.stat().st_size < 4096 + line and older.stat().st_size < 4096 + line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["events.jsonl", "events.jsonl.1"], "one older file, no more"
    said = [e["message"] for e in operate.read_events(tmp_path)]
    assert said[-1] == "event number 0399" and said == sorted(said), "the rotated file first, in order"
    assert len(said) > 4096 // line, "the events of both files"


def test_events_follow_across_a_rotation(tmp_path):
    state = StateDir(tmp_path)
    state.events_max = 1024
    state.event("Said", "r", "first")
    seen = operate.follow_events(tmp_path, None, None, poll=0.01)
    assert next(seen)["message"] == "first"
    for i in range(30):
        state.event("Said", "r", f"later {i:02d}")
    got = []
    while not got or got[-1] != "later 29":  # bounded: the generator reads the file each poll
        got.append(next(seen)["message"])
        assert len(got) <= 31, got
    assert got[-1] == "later 29"


def test_a_rotation_between_two_threads_happens_once(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_text("x" * 100)
    lock = threading.Lock()
    assert rotate(path, 50, lock) and not rotate(path, 50, lock), "the second finds a new (missing) file"
    assert (tmp_path / "events.jsonl.1").read_text() == "x" * 100


def _status(root, name: str, deleted_at: str, phase: str = "Deleted") -> None:
    (root / name).mkdir(parents=True)
    (root / name / "status.json").write_text(json.dumps({"phase": phase, "deletedAt": deleted_at, "workers": []}))
    (root / name / "logs").mkdir()
    (root / name / "logs" / "agg_0.0.log").write_text("its log\n")


def test_deleted_directories_go_after_the_retention_and_beyond_the_most_recent(tmp_path):
    now = 1_800_000_000.0
    ages = {"a": 10, "b": 20, "c": 30, "d": 3 * 86400, "e": 40}
    for n, age in ages.items():
        _status(tmp_path, n, iso(now - age))
    deleted = {n: iso(now - age) for n, age in ages.items()}
    assert remove_expired(tmp_path, deleted, now, 86400, 3) == ["e", "d"], "the oldest beyond 3, and the expired"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b", "c"]
    gw = tmp_path / "a" / "gateway"
    gw.mkdir()
    (gw / "nginx.pid").write_text(f"{os.getpid()}\n")  # a master still running there
    assert remove_expired(tmp_path, {"a": iso(now - 10)}, now + 2 * 86400, 86400, 3) == [], "kept while it runs"
    (gw / "nginx.pid").write_text("999999999\n")
    assert remove_expired(tmp_path, {"a": iso(now - 10)}, now + 2 * 86400, 86400, 3) == ["a"]


def test_the_controller_removes_deleted_recipes_directories(tmp_path):
    """The hostile review's 500 files made and deleted left 517 directories; here twelve, kept five."""
    m = tmp_path / "manifests"
    m.mkdir()
    (m / "stay.yaml").write_text(RECIPE.format(name="stay"))
    names = [f"gone-{i:02d}" for i in range(12)]
    for n in names:
        (m / f"{n}.yaml").write_text(RECIPE.format(name=n))
    c = Controller(m, tmp_path / "state", MemoryDriver(host="node0"))
    c.debounce = 0
    c.state.deleted_keep = 5
    t = [time.time()]
    c.clock = lambda: t[0]
    for _ in range(2):
        c.tick()
    assert all((c.state.root / n / "status.json").exists() for n in names)
    for i, n in enumerate(names):  # deleted one a minute apart
        (m / f"{n}.yaml").unlink()
        for _ in range(3):
            t[0] += 20
            c.tick()
    dirs = {p.name for p in c.state.root.iterdir() if p.is_dir() and p.name.startswith("gone-")}
    assert dirs == set(names[-5:]), dirs
    t[0] += c.state.deleted_retention + 60
    c.tick()
    assert not any(p.name.startswith("gone-") for p in c.state.root.iterdir()), "all past the retention"
    assert (c.state.root / "stay" / "status.json").exists()
    removed = [e for e in operate.read_events(c.state.root) if e["kind"] == "StateRemoved"]
    assert sorted(e["recipe"] for e in removed) == names and "deleted at" in removed[0]["message"]
