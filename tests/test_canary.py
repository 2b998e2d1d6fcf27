"""The frontend canary against a real OpenAI server (the project's mocker): what Ready means."""

from __future__ import annotations

import socket

from reconciler.shell.probe import canary
from tests.helpers import start_mocker


def test_canary_answers_only_when_the_model_is_listed_and_a_completion_returns(tmp_path):
    proc, url = start_mocker(tmp_path, "--speedup-ratio", "100")
    try:
        host, port = url.removeprefix("http://").split(":")
        assert canary(host, int(port), "m") is None
        why = canary(host, int(port), "other")
        assert why is not None and "'other' not listed by /v1/models (m)" in why
    finally:
        proc.stop()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))  # nobody listens here
        why = canary("127.0.0.1", s.getsockname()[1], "m")
    assert why is not None and why.startswith("canary failed: ConnectionRefusedError")


def test_a_new_life_does_not_borrow_its_old_lifes_canary(monkeypatch):
    """A hand-over probes the old and the new frontend life in one pass: each is asked itself."""
    from dataclasses import replace

    from reconciler.shell import probe
    from reconciler.world import Unit

    asked: list[int] = []

    def fake(host, port, model, timeout=probe.CANARY_TIMEOUT):
        asked.append(port)
        return None if port == 1 else "model 'm' not listed by /v1/models (none)"

    monkeypatch.setattr(probe, "canary", fake)
    monkeypatch.setattr(probe, "_canaried", {})
    old = Unit(recipe="r", role="frontend", index=0, ordinals=(0,), nodes=("a",), gpus=(), ports={"http": 1},
               launches=(), container=None, health_port=1, canary="m")
    new = replace(old, nodes=("b",), ports={"http": 2}, health_port=2, slot=1)
    assert probe._canary(old) is True
    assert probe._canary(new) is False and asked == [1, 2]
