"""describe / events / logs helpers on hand-built state directories (no cluster)."""

from __future__ import annotations

import json

import pytest

from reconciler.cli import operate
from reconciler.errors import ReconcilerError
from reconciler.drivers.state import set_suspended, suspended_names


@pytest.mark.parametrize("text, secs", [("90", 90), ("90s", 90), ("5m", 300), ("1h30m", 5400), ("2d", 172800),
                                        ("250ms", 0.25), (" 1H ", 3600)])
def test_durations(text, secs):
    assert operate.parse_duration(text) == pytest.approx(secs)


@pytest.mark.parametrize("bad", ["", "m", "5x", "1h-2m", "5 m", "-3s"])
def test_bad_durations_are_refused(bad):
    with pytest.raises(ValueError, match="expected a duration"):
        operate.parse_duration(bad)


def _events(tmp_path, *recs, torn: str = ""):
    (tmp_path / "events.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs) + torn)


def test_events_filter_by_recipe_and_time_and_skip_torn_lines(tmp_path):
    _events(tmp_path,
            {"time": "2026-12-03T10:00:00Z", "kind": "LaunchStep", "recipe": "a", "message": "one"},
            {"time": "2026-12-03T11:00:00Z", "kind": "LaunchStep", "recipe": "b", "message": "two"},
            {"time": "2026-12-03T12:00:00Z", "kind": "Condition", "recipe": "a", "message": "three"},
            torn='{"time": "2026-12-03T12:0')
    assert [e["message"] for e in operate.read_events(tmp_path)] == ["one", "two", "three"]
    assert [e["message"] for e in operate.read_events(tmp_path, "a")] == ["one", "three"]
    import calendar
    cut = calendar.timegm((2026, 12, 3, 10, 30, 0))
    assert [e["message"] for e in operate.read_events(tmp_path, None, cut)] == ["two", "three"]
    assert operate.read_events(tmp_path / "nowhere") == []


def test_follow_events_yields_the_old_then_the_new_and_waits_for_a_whole_line(tmp_path):
    _events(tmp_path, {"time": "t1", "kind": "k", "recipe": "a", "message": "old"})
    it = operate.follow_events(tmp_path, "a", None, poll=0.01)
    assert next(it)["message"] == "old"
    with (tmp_path / "events.jsonl").open("a") as f:
        f.write(json.dumps({"time": "t2", "kind": "k", "recipe": "b", "message": "other recipe"}) + "\n")
        f.write('{"time": "t3", "kind": "k", "recipe": "a", "message": "new"}')  # no newline yet
        f.flush()
        f.write("\n")
    assert next(it)["message"] == "new"


def _log(tmp_path, unit: str, text: str, previous: str | None = None):
    d = tmp_path / "r" / "logs"
    d.mkdir(parents=True, exist_ok=True)
    (d / f"{unit}.0.log").write_text(text)
    if previous is not None:
        (d / f"{unit}.0.log.1").write_text(previous)


def test_logs_of_a_worker_a_service_by_its_name_and_the_previous_life(tmp_path):
    _log(tmp_path, "decode_1", "a\nb\nc\n", previous="old life\n")
    _log(tmp_path, "svc-etcd_0", "etcd up\n")
    p = operate.log_path(tmp_path, "r", "decode", 1)
    assert operate.tail(p, 2) == ("b\nc\n", 6) and operate.tail(p, None) == ("a\nb\nc\n", 6)
    assert operate.tail(p, 0) == ("", 6)
    assert operate.tail(operate.log_path(tmp_path, "r", "decode", 1, previous=True), 5)[0] == "old life\n"
    assert operate.tail(operate.log_path(tmp_path, "r", "etcd", 0), None)[0] == "etcd up\n"
    with pytest.raises(ReconcilerError, match="units with logs: decode_1, svc-etcd_0"):
        operate.log_path(tmp_path, "r", "prefill", 0)
    with pytest.raises(ReconcilerError, match="no previous life"):
        operate.log_path(tmp_path, "r", "etcd", 0, previous=True)
    with pytest.raises(ReconcilerError, match="no log for r decode_1 \\(rank 1\\)"):
        operate.log_path(tmp_path, "r", "decode", 1, rank=1)
    for recipe, role in (("../r", "decode"), ("r", "../../x"), ("r/..", "agg"), ("", "agg")):
        with pytest.raises(ReconcilerError, match="not a recipe name"):
            operate.log_path(tmp_path, recipe, role, 0)


def test_follow_a_log_across_a_relaunch(tmp_path):
    _log(tmp_path, "agg_0", "first\n")
    p = operate.log_path(tmp_path, "r", "agg", 0)
    it = operate.follow(p, p.stat().st_size, poll=0.01)
    with p.open("a") as f:
        f.write("second\n")
    assert next(it) == "second\n"
    with p.open("a") as f:
        f.write("last words\n")  # the dying life's traceback, written just before the rotation
    p.replace(p.with_name(p.name + ".1"))  # what a relaunch does: rotate, then a fresh file
    p.write_text("new life\n")
    assert next(it) == "last words\n"
    assert "relaunched" in next(it)
    assert next(it) == "new life\n"


def test_suspend_markers(tmp_path):
    assert suspended_names(tmp_path) == frozenset()
    assert set_suspended(tmp_path, "a", True) and not set_suspended(tmp_path, "a", True)
    assert suspended_names(tmp_path) == {"a"}
    assert set_suspended(tmp_path, "a", False) and not set_suspended(tmp_path, "a", False)
    assert suspended_names(tmp_path) == frozenset()


def test_suspension_goes_through_the_desired_cache_both_ways(tmp_path):
    from reconciler.desired.build import build
    from reconciler.core.ports import NodePortAllocator
    from reconciler.desired.admission import load_text
    from reconciler.world import Observed

    r = load_text("name: a\nmodel: {path: m}\nengine: {type: mocker}\nroles: {agg: {workers: 1, gpus: 1}}\n"
                  "frontend: {type: none}\n", "a.yaml", preflight=False).recipe
    cache: dict = {}

    def once(suspended: frozenset[str]):
        return build({"a": r}, Observed(), NodePortAllocator(), tmp_path, "python3", 1, cache,
                     suspended=suspended).recipes["a"]

    first = once(frozenset())
    assert not first.suspended and cache
    s = once(frozenset({"a"}))
    assert s.suspended and s.allocs == first.allocs  # the same computed spec, only marked
    assert not once(frozenset()).suspended  # the cache holds the unmarked build


def test_the_notifier_retries_a_bounded_number_of_times_and_never_blocks_the_caller():
    import threading
    import time as _t
    from http.server import BaseHTTPRequestHandler, HTTPServer

    from reconciler.shell import notify

    got: list[dict] = []
    fails = {"left": 2}
    gate = threading.Event()  # the receiver holds the first POST until the caller has moved on

    class H(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            gate.wait(10)
            if fails["left"] > 0:  # the first two attempts are refused: the third gets through
                fails["left"] -= 1
                self.send_response(503)
            else:
                got.append(body)
                self.send_response(204)
            self.end_headers()

        def log_message(self, *a):
            pass

    srv = HTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        n = notify.Notifier(f"http://127.0.0.1:{srv.server_port}/", backoff=0.01)
        n({"kind": "LaunchStep", "recipe": "a", "message": "not a condition"})
        # planned progress moves Ready and Progressing: not posted (an alert is about Available)
        n({"kind": "Condition", "condition": "Ready", "recipe": "a", "message": "Ready=False: 1/2"})
        n({"kind": "Condition", "condition": "Progressing", "recipe": "a", "message": "Progressing=True"})
        n({"kind": "Condition", "condition": "Available", "recipe": "a", "message": "Available=True: agg 1/1"})
        assert not got  # the caller is back while the receiver still holds the POST: it only enqueued
        gate.set()
        deadline = _t.monotonic() + 10
        # the sender counts a POST once it has the answer, which the receiver sends after recording it
        while n.sent == 0 and _t.monotonic() < deadline:
            _t.sleep(0.01)
        assert [g["message"] for g in got] == ["Available=True: agg 1/1"] and n.sent == 1 and n.dropped == 0
        fails["left"] = 10  # now every attempt fails: dropped after RETRIES
        n({"kind": "Condition", "condition": "Available", "recipe": "a", "message": "Available=False"})
        while n.dropped == 0 and _t.monotonic() < deadline + 10:
            _t.sleep(0.01)
        assert n.dropped == 1 and fails["left"] == 10 - notify.RETRIES
    finally:
        srv.shutdown()
