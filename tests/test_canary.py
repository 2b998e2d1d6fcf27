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
