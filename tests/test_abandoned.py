"""Abandoned work is cancelled; malformed or oversized requests are 400s, never 500s or hangs."""

from __future__ import annotations

import json
import socket
import time

import pytest

from helpers import Proc, free_port, get, metric, post, start_mocker, start_router, wait_until
from helpers import write_endpoints

LONG = {"model": "m", "messages": [{"role": "user", "content": "tell me everything"}], "max_tokens": 200000}


def _open_request(url: str, path: str, body: dict) -> socket.socket:
    """Send a whole request and leave without reading the answer (a client that went away)."""
    host, port = url.removeprefix("http://").split(":")
    raw = json.dumps(body).encode()
    s = socket.create_connection((host, int(port)), timeout=10)
    s.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              f"Content-Length: {len(raw)}\r\n\r\n".encode() + raw)
    return s


@pytest.fixture
def slow_mocker(tmp_path):
    # a real pace: 200k tokens would take minutes, so only cancellation can end it within the test
    proc, url = start_mocker(tmp_path, "--speedup-ratio", "1")
    yield url
    proc.stop()


@pytest.mark.parametrize("stream", [False, True])
def test_mocker_cancels_a_request_whose_client_left(slow_mocker, stream):
    s = _open_request(slow_mocker, "/v1/chat/completions", {**LONG, "stream": stream})
    wait_until(lambda: metric(slow_mocker, "vllm:num_requests_running") == 1, what="request running")
    assert metric(slow_mocker, "vllm:kv_cache_usage_perc") > 0
    s.close()
    wait_until(lambda: metric(slow_mocker, "vllm:num_requests_running") == 0, timeout=10, what="request cancelled")
    assert metric(slow_mocker, "vllm:kv_cache_usage_perc") == 0
    status, _ = post(slow_mocker + "/v1/completions", {"prompt": "x", "max_tokens": 2})
    assert status == 200


def test_router_cancels_upstream_when_its_client_left(slow_mocker, tmp_path):
    ep = tmp_path / "endpoints.json"
    write_endpoints(ep, [{"url": slow_mocker, "role": "agg"}])
    port = free_port()
    router = Proc("reconciler.router", "--host", "127.0.0.1", "--port", str(port), "--endpoints-file", str(ep),
                  log=tmp_path / "router.log")
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: get(url + "/health")[0] == 200 and json.loads(get(url + "/health")[1])["workers"],
                   what="router routes")
        s = _open_request(url, "/v1/chat/completions", LONG)
        wait_until(lambda: metric(slow_mocker, "vllm:num_requests_running") == 1, what="request running upstream")
        s.close()
        wait_until(lambda: metric(slow_mocker, "vllm:num_requests_running") == 0, timeout=10,
                   what="upstream request cancelled")
    finally:
        router.stop()


def test_max_model_len_bounds_prompt_plus_max_tokens(tmp_path):
    proc, url = start_mocker(tmp_path, "--speedup-ratio", "0", "--max-model-len", "64")
    try:
        status, raw = post(url + "/v1/completions", {"prompt": "a b c", "max_tokens": 100})
        assert status == 400
        err = json.loads(raw)["error"]
        assert "maximum context length is 64 tokens" in err["message"] and err["type"] == "invalid_request_error"
        assert post(url + "/v1/completions", {"prompt": "a b c", "max_tokens": 10})[0] == 200
        # without max_model_len the KV cache bounds it: 10**12 tokens is refused, not queued forever
        status, raw = post(url + "/v1/completions", {"prompt": "x", "max_tokens": 10**12})
        assert status == 400
    finally:
        proc.stop()


def _nested(depth: int) -> bytes:
    return b'{"model": "m", "messages": ' + b"[" * depth + b"]" * depth + b"}"


BAD = [
    ("/v1/chat/completions", _nested(100000), "nested"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]},
     "content parts"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": [7]}]}, "content parts"),
    ("/v1/completions", {"prompt": "x", "max_tokens": 10**30}, "max_tokens"),
]


@pytest.mark.parametrize("path, body, fragment", BAD)
def test_malformed_bodies_are_400_at_the_mocker(tmp_path, path, body, fragment):
    proc, url = start_mocker(tmp_path, "--speedup-ratio", "0")
    try:
        status, raw = post(url + path, body)
        assert status == 400, raw
        assert fragment in json.loads(raw)["error"]["message"]
        assert get(url + "/health")[0] == 200
    finally:
        proc.stop()


def test_a_partial_body_times_out(tmp_path):
    proc, url = start_mocker(tmp_path, "--speedup-ratio", "0", "--request-timeout", "1")
    try:
        host, port = url.removeprefix("http://").split(":")
        s = socket.create_connection((host, int(port)), timeout=15)
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 1000\r\n\r\n{\"prompt\": ")
        t0 = time.monotonic()
        answer = s.recv(4096)
        assert answer.startswith(b"HTTP/1.1 408"), answer
        assert time.monotonic() - t0 < 10
        s.close()
    finally:
        proc.stop()


@pytest.mark.parametrize("server", ["mocker", "router"])
@pytest.mark.parametrize("sent", [b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n", b""], ids=["partial", "silent"])
def test_headers_that_never_end_are_cut_off(tmp_path, server, sent):
    """Half-open connections (headers that never end, or nothing at all) are closed by both servers."""
    if server == "mocker":
        proc, url = start_mocker(tmp_path, "--speedup-ratio", "0", "--request-timeout", "1")
    else:
        ep = tmp_path / "endpoints.json"
        write_endpoints(ep, [])
        proc, url = start_router(tmp_path, ep, "--request-timeout", "1")
    try:
        host, port = url.removeprefix("http://").split(":")
        s = socket.create_connection((host, int(port)), timeout=15)
        s.sendall(sent)  # and nothing more
        t0 = time.monotonic()
        assert s.recv(4096) == b""  # the server closed the connection
        assert time.monotonic() - t0 < 10
        s.close()
        assert get(url + "/health")[0] == 200
    finally:
        proc.stop()


def test_router_counts_its_5xx(tmp_path):
    ep = tmp_path / "endpoints.json"
    write_endpoints(ep, [])
    router, url = start_router(tmp_path, ep)
    try:
        assert post(url + "/v1/completions", {"prompt": "x"})[0] == 503
        assert post(url + "/v1/completions", _nested(100000))[0] == 400
        _, text = get(url + "/metrics")
        lines = text.decode().splitlines()
        assert any(l.startswith('router_requests_total{endpoint="/v1/completions",status="503"} 1.0') for l in lines)
        assert any(l.startswith('router_requests_total{endpoint="/v1/completions",status="400"} 1.0') for l in lines)
    finally:
        router.stop()
