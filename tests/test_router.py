"""The builtin router: balancing, disaggregation, failover, live endpoint changes."""

from __future__ import annotations

import json
import threading

import pytest

from helpers import get, metric, post, sse_events, start_mocker, start_router, wait_until
from helpers import write_endpoints


@pytest.fixture
def router(tmp_path):
    ep = tmp_path / "endpoints.json"
    write_endpoints(ep, [])
    proc, url = start_router(tmp_path, ep, "--poll-interval", "0.05")
    yield url, ep, proc
    proc.stop()


def wait_workers(url, **roles):
    wait_until(lambda: json.loads(get(url + "/health")[1])["workers"] == roles, what=f"router sees {roles}")


def test_no_workers_is_a_clear_503(router):
    url, ep, _ = router
    status, raw = post(url + "/v1/completions", {"prompt": "x"})
    assert status == 503
    assert "no worker" in json.loads(raw)["error"]["message"]


def test_malformed_requests_are_400_at_the_router(router):
    url, _, _ = router
    assert post(url + "/v1/chat/completions", b"{oops")[0] == 400
    assert post(url + "/v1/chat/completions", b"\"text\"")[0] == 400


def test_balances_streams_and_follows_endpoint_file_changes(router, tmp_path):
    url, ep, _ = router
    a, aurl = start_mocker(tmp_path, "--speedup-ratio", "0", name="a")
    b, burl = start_mocker(tmp_path, "--speedup-ratio", "0", name="b")
    try:
        write_endpoints(ep, [{"url": aurl, "role": "agg"}])
        wait_workers(url, agg=1)
        status, raw = post(url + "/v1/chat/completions",
                           {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "stream": True})
        ev = sse_events(raw)
        assert status == 200 and ev[-1] == "[DONE]" and len(ev) == 6  # 4 tokens + final + DONE
        write_endpoints(ep, [{"url": aurl, "role": "agg"}, {"url": burl, "role": "agg", "extra": 1}])
        wait_workers(url, agg=2)
        results: list = []

        def one() -> None:
            results.append(post(url + "/v1/completions", {"prompt": "x", "max_tokens": 20}))

        threads = [threading.Thread(target=one) for _ in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert [r[0] for r in results] == [200] * 16, results
        assert all(json.loads(r[1])["usage"]["completion_tokens"] == 20 for r in results), results
        served_a = metric(aurl, "vllm:request_success_total")
        served_b = metric(burl, "vllm:request_success_total")
        assert served_a + served_b == 1 + 16, (served_a, served_b)  # the stream before, then all 16 once
        assert served_b > 0 and served_a > 1, (served_a, served_b)  # both got traffic
    finally:
        a.stop()
        b.stop()


def _all_answered_with_a_retry(url: str) -> None:
    """Ten requests while one of two listed workers fails them: each answered 200, by a retry."""
    results = [post(url + "/v1/completions", {"prompt": "x", "max_tokens": 3})[0] for _ in range(10)]
    assert results == [200] * 10
    assert metric(url, "router_retries_total") >= 1


def test_survives_a_worker_killed_mid_test(router, tmp_path):
    url, ep, _ = router
    a, aurl = start_mocker(tmp_path, "--speedup-ratio", "0", name="a")
    b, burl = start_mocker(tmp_path, "--speedup-ratio", "0", name="b")
    try:
        write_endpoints(ep, [{"url": aurl, "role": "agg"}, {"url": burl, "role": "agg"}])
        wait_workers(url, agg=2)
        assert post(url + "/v1/completions", {"prompt": "x"})[0] == 200
        a.p.kill()
        a.p.wait()
        # the endpoints file still lists the dead worker: refused connections are retried elsewhere
        _all_answered_with_a_retry(url)
    finally:
        a.stop()
        b.stop()


def _resetting_worker() -> tuple[str, threading.Event]:
    """A worker that reads each request and resets the connection (RST, no answer): a life that
    is stopped as the router sends to it."""
    import socket
    import struct

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    srv.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            conn.recv(65536)
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            conn.close()
        srv.close()

    threading.Thread(target=serve, daemon=True).start()
    return f"http://127.0.0.1:{srv.getsockname()[1]}", stop


def test_a_worker_that_resets_the_connection_is_retried_elsewhere(router, tmp_path):
    url, ep, _ = router
    bad, stop = _resetting_worker()
    b, burl = start_mocker(tmp_path, "--speedup-ratio", "0", name="b")
    try:
        write_endpoints(ep, [{"url": bad, "role": "agg"}, {"url": burl, "role": "agg"}])
        wait_workers(url, agg=2)
        _all_answered_with_a_retry(url)
    finally:
        stop.set()
        b.stop()


def test_disaggregated_prefill_then_decode(router, tmp_path):
    url, ep, _ = router
    p, purl = start_mocker(tmp_path, "--mode", "prefill", "--speedup-ratio", "0", name="p")
    d, durl = start_mocker(tmp_path, "--mode", "decode", "--speedup-ratio", "0", name="d")
    try:
        write_endpoints(ep, [{"url": purl, "role": "prefill"}, {"url": durl, "role": "decode"}])
        wait_workers(url, prefill=1, decode=1)
        status, raw = post(url + "/v1/chat/completions",
                           {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 6, "stream": True,
                            "stream_options": {"include_usage": True}})
        assert status == 200
        ev = sse_events(raw)
        usage = [e for e in ev[:-1] if not e["choices"]][0]["usage"]
        assert usage["completion_tokens"] == 6
        assert metric(purl, "vllm:request_success_total") == 1  # prefill ran there
        assert metric(durl, "vllm:request_success_total") == 1  # decode there
    finally:
        p.stop()
        d.stop()


def test_router_metrics_and_models(router, tmp_path):
    url, ep, _ = router
    a, aurl = start_mocker(tmp_path, "--speedup-ratio", "0", name="a")
    try:
        write_endpoints(ep, [{"url": aurl, "role": "agg"}])
        wait_workers(url, agg=1)
        post(url + "/v1/completions", {"prompt": "x"})
        _, text = get(url + "/metrics")
        assert b"router_requests_total" in text
        assert json.loads(get(url + "/v1/models")[1])["data"][0]["id"] == "m"
    finally:
        a.stop()


def test_a_vanished_endpoints_file_keeps_the_last_list_and_a_new_one_is_followed(router, tmp_path):
    """`rm -rf state/*` under a running reconciler: the router keeps serving its last workers."""
    url, ep, proc = router
    a, aurl = start_mocker(tmp_path, "--speedup-ratio", "0", name="a")
    try:
        write_endpoints(ep, [{"url": aurl, "role": "agg"}])
        wait_workers(url, agg=1)
        ep.unlink()
        wait_until(lambda: "is gone" in proc.output(), what="the router to notice the file gone")
        assert [post(url + "/v1/completions", {"prompt": "x", "max_tokens": 2})[0] for _ in range(5)] == [200] * 5
        write_endpoints(ep, [])  # written again: followed as ever
        wait_workers(url)
    finally:
        a.stop()


def test_an_oversized_body_is_413_at_the_router_as_at_the_engine(router, tmp_path):
    url, ep, _ = router
    a, aurl = start_mocker(tmp_path, "--speedup-ratio", "0", name="a")
    try:
        write_endpoints(ep, [{"url": aurl, "role": "agg"}])
        wait_workers(url, agg=1)
        big = b'{"prompt": "' + b"x" * (20 * 1024 * 1024) + b'"}'
        for target in (url, aurl):
            status, raw = post(target + "/v1/completions", big)
            assert status == 413, (target, raw[:200])
            assert "larger than" in json.loads(raw)["error"]["message"]
    finally:
        a.stop()


def _stream_until_cut(url: str, body: dict, kill) -> bytes:
    """POST a streaming request, kill its worker once the first event came, read to the end."""
    import http.client
    from urllib.parse import urlsplit

    u = urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    conn.request("POST", "/v1/chat/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    assert r.status == 200 and r.getheader("Content-Type", "").startswith("text/event-stream")
    got = r.readline()
    while not got.startswith(b"data: "):
        got = r.readline()
    kill()
    try:
        return got + r.read()
    finally:
        conn.close()


def test_a_stream_cut_by_its_workers_death_ends_with_an_error_event(router, tmp_path):
    """Issue 48, item 8: a worker killed mid-stream ended the client's 200 with a clean end, as if
    the answer were whole. The stream now ends with an OpenAI-shaped error event."""
    url, ep, _ = router
    a, aurl = start_mocker(tmp_path, "--speedup-ratio", "1", name="a")
    try:
        write_endpoints(ep, [{"url": aurl, "role": "agg"}])
        wait_workers(url, agg=1)
        raw = _stream_until_cut(url, {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 20000,
                                      "stream": True}, a.p.kill)
        events = sse_events(raw)
        assert "[DONE]" not in events and len(events) >= 2, raw[-500:]
        err = events[-1]["error"]
        assert err["code"] == 502 and "failed mid-response" in err["message"] and aurl in err["message"], err
        assert all("choices" in e for e in events[:-1]), "the tokens before the cut reached the client"
    finally:
        a.stop()


def test_a_json_body_cut_by_its_workers_death_is_cut_for_the_client_too(router):
    """Nothing can be appended to a JSON document: the client's read fails instead of ending cleanly
    on half an answer. The worker here is a socket that sends half a chunked body and closes."""
    import http.client
    import socket
    from urllib.parse import urlsplit

    url, ep, _ = router
    srv = socket.create_server(("127.0.0.1", 0))
    port = srv.getsockname()[1]

    def half_answer() -> None:
        while True:
            try:
                c, _ = srv.accept()
            except OSError:
                return
            with c:
                c.recv(65536)
                c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
                          b"9\r\n{\"id\": 1,\r\n")  # and the worker dies

    threading.Thread(target=half_answer, daemon=True).start()
    try:
        write_endpoints(ep, [{"url": f"http://127.0.0.1:{port}", "role": "agg"}])
        wait_workers(url, agg=1)
        u = urlsplit(url)
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
        conn.request("POST", "/v1/completions", body=json.dumps({"prompt": "x"}),
                     headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        assert r.status == 200
        with pytest.raises((http.client.IncompleteRead, ConnectionError)):
            r.read()
        conn.close()
    finally:
        srv.close()
