"""Repeated events are folded into one line with a count (drivers/event_fold.py), on a real file."""

from __future__ import annotations

import json

from reconciler.drivers.event_fold import TAIL
from reconciler.drivers.state import StateDir


def lines(state: StateDir) -> list[dict]:
    return [json.loads(l) for l in (state.root / "events.jsonl").read_text().splitlines()]


def test_the_same_message_again_is_one_line_with_a_count_and_its_last_time(tmp_path):
    s = StateDir(tmp_path)
    refused = "agg_0 rank 0: launcher exited 255: srun: unrecognized option '--container-image=x'"
    for i in range(5):
        s.event("LaunchStep", "r", f"launch r/agg_0 (restart {i})")
        s.event("LaunchFailed", "r", refused, reason="ConfigError")
    got = lines(s)
    assert [e["kind"] for e in got] == ["LaunchStep"] * 5 + ["LaunchFailed"]
    failed = got[-1]
    assert failed["count"] == 5 and failed["message"] == refused and failed["reason"] == "ConfigError"
    assert failed["firstTime"] <= failed["time"]


def test_another_message_or_another_object_is_not_folded(tmp_path):
    s = StateDir(tmp_path)
    s.event("LaunchFailed", "r", "a")
    s.event("LaunchFailed", "r", "b")
    s.event("LaunchFailed", "r", "a")  # not the object's last message: a new line
    s.event("LaunchFailed", "q", "a")  # another recipe
    s.event("NodeQuarantined", None, "x", node="n1")
    s.event("NodeQuarantined", None, "x", node="n2")  # another node
    s.event("NodeQuarantined", None, "x", node="n2")
    got = lines(s)
    assert [(e["recipe"], e["message"], e.get("count", 1)) for e in got] == [
        ("r", "a", 1), ("r", "b", 1), ("r", "a", 1), ("q", "a", 1), (None, "x", 1), (None, "x", 2)]


def test_a_line_far_back_is_not_rewritten_the_count_goes_on_in_a_new_line(tmp_path):
    s = StateDir(tmp_path)
    s.event("Held", "r", "cannot be computed")
    for i in range(TAIL // 80 + 10):
        s.event("Condition", f"o{i}", "Ready=True: " + "x" * 60)
    s.event("Held", "r", "cannot be computed")
    held = [e for e in lines(s) if e["kind"] == "Held"]
    assert [e.get("count", 1) for e in held] == [1, 2]


def test_a_file_rotated_or_written_by_someone_else_starts_afresh(tmp_path):
    s = StateDir(tmp_path)
    s.event("Held", "r", "same")
    (tmp_path / "events.jsonl").rename(tmp_path / "events.jsonl.1")
    s.event("Held", "r", "same")
    assert [e.get("count", 1) for e in lines(s)] == [1]
    with open(tmp_path / "events.jsonl", "a") as f:
        f.write(json.dumps({"time": "t", "kind": "Other", "recipe": None, "message": "m"}) + "\n")
    s.event("Held", "r", "same")
    assert [e.get("count", 1) for e in lines(s)] == [1, 1, 1]
