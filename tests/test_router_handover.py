"""Two lives of the built-in router on one port (router/listen.py): the newest listener takes every
new connection while the old one finishes; each life answers only its own health probe."""

from __future__ import annotations

import json
import select
import socket
from pathlib import Path

from helpers import Proc, free_port, get, post, start_mocker, wait_until
from reconciler.shell.readiness.probe import probe_life, probe_one
from reconciler.router.listen import shared_listener


def _accepted_by(listeners: list[socket.socket], port: int, n: int = 40) -> list[int]:
    """Connect ``n`` times; per connection, the index of the listener that got it."""
    got = []
    for _ in range(n):
        c = socket.create_connection(("127.0.0.1", port), timeout=5)
        ready, _, _ = select.select(listeners, [], [], 5)
        assert ready, "no listener got the connection"
        conn, _ = ready[0].accept()
        got.append(listeners.index(ready[0]))
        conn.close()
        c.close()
    return got


def test_the_newest_listener_takes_every_new_connection_and_the_last_one_left_takes_all():
    port = free_port()
    old = shared_listener("127.0.0.1", port)
    new = shared_listener("127.0.0.1", port)
    try:
        assert set(_accepted_by([old, new], port)) == {1}  # all to the newest, none hashed to the old
        old.close()
        assert set(_accepted_by([new], port)) == {0}  # alone: the kernel's fallback picks it
        third = shared_listener("127.0.0.1", port)
        try:
            assert set(_accepted_by([new, third], port)) == {1}
        finally:
            third.close()
    finally:
        new.close()
        old.close()


def test_a_second_router_life_shares_the_port_and_answers_only_its_own_probe(tmp_path):
    ep = tmp_path / "endpoints.json"
    mocker, mock_url = start_mocker(tmp_path)
    ep.write_text(json.dumps({"workers": [{"url": mock_url, "role": "agg"}]}))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    lives = []
    try:
        for life in ("a", "b"):
            lives.append(Proc("reconciler.router", "--host", "127.0.0.1", "--port", str(port), "--endpoints-file",
                              str(ep), "--life", life, log=tmp_path / f"router-{life}.log"))
            if life == "a":
                wait_until(lambda: probe_one("127.0.0.1", port, "/health?life=a"), what="life a answers")
                assert not probe_one("127.0.0.1", port, "/health?life=b")  # a says "not me"
                assert probe_one("127.0.0.1", port, "/health?life=a")  # now a kept connection to a
            else:
                # the kept connection reaches a, which says "not me": asked again on a fresh one, b answers
                wait_until(lambda: (Path(tmp_path / "router-b.log").read_text().count("ready") > 0), what="b up")
                assert probe_one("127.0.0.1", port, "/health?life=b")
        # b bound last: every new connection is b's, so a's probe is answered "not me"
        assert get(f"{url}/health?life=a")[0] == 404
        assert post(url + "/v1/completions", {"prompt": "x", "max_tokens": 2})[0] == 200
        lives[0].stop()
        assert get(f"{url}/health?life=b")[0] == 200 and get(f"{url}/health")[0] == 200
        assert probe_life("127.0.0.1", port, "/health?life=b", "b")
        assert not probe_life("127.0.0.1", port, "/health", "a")  # 200, but from life b
    finally:
        for p in lives:
            p.stop()
        mocker.stop()
