"""The mocker as a process: OpenAI endpoints, health, metrics, batching limits, faults."""

from __future__ import annotations

import json
import threading

import pytest

from helpers import get, metric, post, sse_events, start_mocker, wait_until


@pytest.fixture
def mocker(tmp_path):
    proc, url = start_mocker(tmp_path, "--speedup-ratio", "0")
    yield url
    proc.stop()


CHAT = {"model": "m", "messages": [{"role": "user", "content": "hello there"}], "max_tokens": 5}


def test_chat_non_streaming(mocker):
    status, body = post(mocker + "/v1/chat/completions", CHAT)
    assert status == 200
    d = json.loads(body)
    assert d["object"] == "chat.completion" and d["model"] == "m"
    assert d["choices"][0]["message"]["role"] == "assistant" and d["choices"][0]["message"]["content"]
    assert d["choices"][0]["finish_reason"] == "length"
    assert d["usage"]["completion_tokens"] == 5 and d["usage"]["prompt_tokens"] > 0


def test_chat_streaming_with_usage(mocker):
    status, body = post(mocker + "/v1/chat/completions", {**CHAT, "stream": True, "stream_options": {"include_usage": True}})
    assert status == 200
    ev = sse_events(body)
    assert ev[-1] == "[DONE]"
    chunks = [e for e in ev[:-1] if e["choices"]]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert sum(1 for c in chunks if c["choices"][0]["delta"].get("content")) == 5
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    usage = [e for e in ev[:-1] if not e["choices"]]
    assert usage and usage[0]["usage"]["completion_tokens"] == 5


def test_completions_both_ways_and_deterministic_text(mocker):
    body = {"prompt": "the same prompt", "max_tokens": 7}
    s1, b1 = post(mocker + "/v1/completions", body)
    s2, b2 = post(mocker + "/v1/completions", body)
    assert s1 == s2 == 200
    assert json.loads(b1)["choices"][0]["text"] == json.loads(b2)["choices"][0]["text"]
    status, raw = post(mocker + "/v1/completions", {**body, "stream": True})
    ev = sse_events(raw)
    text = "".join(e["choices"][0]["text"] for e in ev[:-1])
    assert ev[-1] == "[DONE]" and text == json.loads(b1)["choices"][0]["text"]


def test_models_and_metrics_names(mocker):
    status, body = get(mocker + "/v1/models")
    assert status == 200 and json.loads(body)["data"][0]["id"] == "m"
    post(mocker + "/v1/completions", {"prompt": "x", "max_tokens": 3})
    _, text = get(mocker + "/metrics")
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
                 "vllm:num_preemptions_total", "vllm:time_to_first_token_seconds_bucket",
                 "vllm:inter_token_latency_seconds_bucket", "vllm:e2e_request_latency_seconds_bucket",
                 "vllm:request_success_total", "vllm:generation_tokens_total", "vllm:prompt_tokens_total"):
        assert name in text.decode(), name
    assert metric(mocker, "vllm:generation_tokens_total") >= 3


@pytest.mark.parametrize(
    "path, body, fragment",
    [
        ("/v1/chat/completions", b"{not json", "not valid JSON"),
        ("/v1/chat/completions", b"[1, 2]", "JSON object"),
        ("/v1/chat/completions", {"max_tokens": 3}, "'messages' is required"),
        ("/v1/chat/completions", {"messages": [{"content": "x"}]}, "string 'role'"),
        ("/v1/completions", {"max_tokens": 3}, "'prompt' is required"),
        ("/v1/completions", {"prompt": "x", "max_tokens": 0}, "positive integer"),
        ("/v1/completions", {"prompt": "x", "stream": "yes"}, "'stream' must be a boolean"),
    ],
)
def test_bad_requests_get_openai_shaped_400(mocker, path, body, fragment):
    status, raw = post(mocker + path, body)
    assert status == 400
    err = json.loads(raw)["error"]
    assert fragment in err["message"] and err["type"] == "invalid_request_error" and err["code"] == 400


def test_unknown_model_is_404(mocker):
    status, raw = post(mocker + "/v1/completions", {"model": "other", "prompt": "x"})
    assert status == 404 and "does not exist" in json.loads(raw)["error"]["message"]


def test_health_is_503_until_startup_time_passes(tmp_path):
    # the startup clock starts when the server listens; 4 s leaves the 503 checks a wide margin
    proc, url = start_mocker(tmp_path, "--startup-time", "4")
    try:
        assert get(url + "/health")[0] == 503
        assert post(url + "/v1/completions", {"prompt": "x"})[0] == 503
        wait_until(lambda: get(url + "/health")[0] == 200, timeout=15, what="ready")
        assert "ready after 4s" in proc.output()
    finally:
        proc.stop()


def _fire(url, n, body, results: list | None = None):
    """``n`` completions in threads; each one's (status, body) lands in ``results``."""
    out = results if results is not None else []

    def one() -> None:
        out.append(post(url + "/v1/completions", body, timeout=90))

    threads = [threading.Thread(target=one, daemon=True) for _ in range(n)]
    for t in threads:
        t.start()
    return threads


def _finished(threads: list, results: list, n: int, max_tokens: int) -> None:
    """Every request answered 200 with a whole completion of ``max_tokens`` tokens."""
    for t in threads:
        t.join(90)
    assert not any(t.is_alive() for t in threads), "a request did not finish"
    assert [r[0] for r in results] == [200] * n, results
    assert [json.loads(r[1])["usage"]["completion_tokens"] for r in results] == [max_tokens] * n


def test_request_beyond_max_num_seqs_waits(tmp_path):
    s = 3
    proc, url = start_mocker(tmp_path, "--speedup-ratio", "1", "--max-num-seqs", str(s))
    try:
        results: list = []
        threads = _fire(url, s + 1, {"prompt": "wait for me", "max_tokens": 300}, results)
        wait_until(lambda: metric(url, "vllm:num_requests_running") == s and metric(url, "vllm:num_requests_waiting") == 1,
                   timeout=15, what=f"{s} running and 1 waiting")
        _finished(threads, results, s + 1, 300)  # the one that waited was served in full too
        assert metric(url, "vllm:num_requests_running") == 0 and metric(url, "vllm:num_requests_waiting") == 0
        assert metric(url, "vllm:request_success_total") == s + 1
    finally:
        proc.stop()


def test_kv_exhaustion_causes_counted_preemptions(tmp_path):
    # 12 blocks of 4 tokens; each request needs 7 (5 prompt + 20 generated): two at once cannot both fit.
    # The second is sent only once the first is running, and the first runs for seconds (speedup 0.1),
    # so they overlap whatever the scheduler's jitter: a preemption must follow.
    proc, url = start_mocker(tmp_path, "--speedup-ratio", "0.1", "--num-gpu-blocks", "12", "--block-size", "4",
                             "--no-enable-prefix-caching")
    try:
        body = {"prompt": "one two three four five", "max_tokens": 20}
        results: list = []
        first = _fire(url, 1, body, results)
        wait_until(lambda: metric(url, "vllm:num_requests_running") == 1, timeout=15, what="the first running")
        second = _fire(url, 1, body, results)
        wait_until(lambda: metric(url, "vllm:num_preemptions_total") > 0, timeout=30, what="a preemption")
        _finished(first + second, results, 2, 20)  # preempted, yet both completed in full
        assert metric(url, "vllm:request_success_total") == 2
    finally:
        proc.stop()


def test_crash_after_prints_fatal_and_exits_nonzero(tmp_path):
    proc, url = start_mocker(tmp_path, "--crash-after", "0.5")
    try:
        code = proc.p.wait(10)
        assert code != 0
        assert "FATAL mocker: simulated engine crash" in proc.output()
    finally:
        proc.stop()


def test_hang_after_stays_alive_but_stops_answering(tmp_path):
    proc, url = start_mocker(tmp_path, "--hang-after", "0.5")
    try:
        wait_until(lambda: "FATAL mocker: simulated engine hang" in proc.output(), timeout=10, what="fatal line")
        # a timeout, not a refused or closed connection: the process listens, accepts, and is silent
        with pytest.raises(TimeoutError):
            get(url + "/health", timeout=1)
        assert proc.p.poll() is None
    finally:
        proc.stop()


def test_prefill_handle_then_decode(tmp_path):
    pre, purl = start_mocker(tmp_path, "--mode", "prefill", "--speedup-ratio", "0", name="prefill")
    dec, durl = start_mocker(tmp_path, "--mode", "decode", "--speedup-ratio", "0", name="decode")
    try:
        status, raw = post(purl + "/v1/completions", {"prompt": "a b c d", "max_tokens": 9})
        d = json.loads(raw)
        assert status == 200 and d["usage"]["completion_tokens"] == 1  # answers after the first token
        handle = d["disaggregated_params"]
        status, raw = post(durl + "/v1/completions", {"prompt": "a b c d", "max_tokens": 9, "disaggregated_params": handle})
        assert status == 200 and json.loads(raw)["usage"]["completion_tokens"] == 9
        status, raw = post(durl + "/v1/completions", {"prompt": "x", "disaggregated_params": {"handle": "garbage!"}})
        assert status == 400
        assert post(purl + "/v1/completions", {"prompt": "x", "disaggregated_params": handle})[0] == 400
    finally:
        pre.stop()
        dec.stop()


def test_with_the_models_tokenizer_a_client_counts_exactly_max_tokens(tmp_path):
    from tokenizers import Tokenizer

    from reconciler.mocker.model_dir import make_model_dir

    model = make_model_dir(tmp_path / "tiny")
    tok = Tokenizer.from_file(str(model / "tokenizer.json"))
    proc, url = start_mocker(tmp_path, "--speedup-ratio", "0", "--model-path", str(model))
    try:
        assert "tokens: the model's tokenizer" in proc.output()
        prompt = "the quick brown fox jumps over the lazy dog " * 8
        status, raw = post(url + "/v1/chat/completions", {
            "messages": [{"role": "user", "content": prompt}], "max_tokens": 64, "stream": True,
            "stream_options": {"include_usage": True}})
        assert status == 200
        events = [e for e in sse_events(raw) if isinstance(e, dict)]  # the last one is "[DONE]"
        text = "".join(e["choices"][0]["delta"].get("content", "") for e in events if e.get("choices"))
        assert len(tok.encode(text, add_special_tokens=False).ids) == 64  # what aiperf counts
        usage = next(e["usage"] for e in events if e.get("usage"))
        assert usage["completion_tokens"] == 64
        content = len(tok.encode(prompt, add_special_tokens=False).ids)
        assert content <= usage["prompt_tokens"] <= content + 8  # the content plus the role it is framed with
    finally:
        proc.stop()


def test_answers_the_sglang_server_info_routes_the_router_reads(tmp_path):
    proc, url = start_mocker(tmp_path, "--mode", "decode", "--model-path", "/models/m")
    try:
        for path in ("/get_model_info", "/model_info"):
            status, body = get(url + path)
            assert status == 200 and json.loads(body)["model_path"] == "/models/m"
        for path in ("/get_server_info", "/server_info"):
            status, body = get(url + path)
            info = json.loads(body)
            assert status == 200 and info["served_model_name"] == "m" and info["disaggregation_mode"] == "decode"
    finally:
        proc.stop()
