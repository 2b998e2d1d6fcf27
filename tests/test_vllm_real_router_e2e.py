"""Two real vLLM workers behind a real router (sglang-router), then scaled down while streams run.

The same tiny random-weights Llama and ``vllm serve`` as tests/test_vllm_real_e2e.py, two
workers of one GPU on the local Slurm, the SGLang router in front (the reconciler adds each
worker through its /workers API as it turns Ready) and the gateway before it. Then the file
says one worker while streamed completions run on both: the victim is drained (out of the
router, its streams finish) before Slurm's SIGTERM, so every stream ends whole.
"""

from __future__ import annotations

import http.client
import json
import threading
from urllib.parse import urlsplit

import pytest

from helpers import metric, post, sse_events, wait_until
from support.vllm import EAGER, deployment, recipe

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(2400)]
# round robin: the router's default (cache-aware) sent all eight streams to one worker, so the
# scale-down found none on its victim
ROUTER = "frontend: {type: sglang-router, args: {policy: round_robin}}\n"
# with ignore_eos: 10-40 s a stream here, so they still run when the edit lands (200 tokens ended
# before the victim was looked at); prompt + output within the model's 2,048 positions
TOKENS, MAX_LEN = 1500, 2048
# an edit's victims are stopped pickup + drain seconds after it (docs/recipes.md, rollout.drain_seconds),
# not once idle: the drain covers the streams, and the test shows nothing is cut within it
DRAIN = "reconcile: {rollout: {drain_seconds: 120}}\n"


@pytest.fixture(scope="module")
def dep(tmp_path_factory):
    """Two Ready vLLM workers behind the SGLang router (harness, name, endpoint, served model)."""
    yield from deployment(tmp_path_factory, "vllm-router", "vllm2", 1, lambda name, model: recipe(name, model, workers=2, max_len=MAX_LEN, args=EAGER, extra=DRAIN).replace("frontend: {type: builtin}\n", ROUTER))


def test_two_vllm_workers_serve_behind_the_sglang_router(dep):
    h, name, endpoint, served = dep
    g = h.get(name)
    assert g["roles"]["agg"]["ready"] == 2 and g["status"] == "Ready", g
    for i in range(4):
        status, body = post(endpoint + "/v1/chat/completions",
                            {"model": served, "messages": [{"role": "user", "content": f"hello {i}"}], "max_tokens": 4},
                            timeout=60)
        assert status == 200, body


class Stream(threading.Thread):
    """One streamed chat completion of ``TOKENS`` tokens: how many arrived, and whether it ended whole."""

    def __init__(self, endpoint: str, model: str, prompt: str):
        super().__init__(daemon=True)
        u = urlsplit(endpoint)
        self.host, self.port, self.model, self.prompt = u.hostname, u.port, model, prompt
        self.started = threading.Event()
        self.tokens, self.done, self.error, self.finish = 0, False, "", None

    def run(self) -> None:
        body = json.dumps({"model": self.model, "messages": [{"role": "user", "content": self.prompt}], "stream": True,
                           "max_tokens": TOKENS, "ignore_eos": True,
                           # the engine's own count: a random-weights model's tokens often decode to no text
                           "stream_options": {"include_usage": True}}).encode()
        conn = http.client.HTTPConnection(self.host, self.port, timeout=120)
        try:
            conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
            r = conn.getresponse()
            if r.status != 200:
                self.error = f"{r.status}: {r.read()[:200]!r}"
                return
            raw = b""
            while chunk := r.read1(65536):
                raw += chunk
                self.started.set()
            events = sse_events(raw)
            self.done = events[-1:] == ["[DONE]"]
            data = [e for e in events if e != "[DONE]"]
            self.finish = next((c.get("finish_reason") for e in reversed(data) for c in e.get("choices") or []
                                if c.get("finish_reason")), None)
            self.tokens = next((e["usage"]["completion_tokens"] for e in reversed(data) if e.get("usage")), 0)
        except (OSError, http.client.HTTPException, ValueError) as e:
            self.error = repr(e)
        finally:
            self.started.set()  # a stream that failed before its first chunk must not hold the test
            conn.close()


def test_a_scale_down_lets_the_victims_streams_finish(dep, summary):
    h, name, endpoint, served = dep
    victim = h.steps(name)["agg_1"][0]
    rec = json.loads((h.state / name / "launches.json").read_text())["agg_1"]
    node, ports = next(iter(rec["ports"].items()))
    victim_url = f"http://{node}:{ports['http']}"
    # distinct prompts: a cache-aware router would send one prompt's repeats to one worker
    streams = [Stream(endpoint, served, f"story {i} of {i * 7919}") for i in range(8)]
    for s in streams:
        s.start()
    for s in streams:
        assert s.started.wait(300), "no stream began"
    assert not [s.error for s in streams if s.error], [s.error for s in streams]
    # the scale-down must find streams running on its victim, or it proves nothing
    running = metric(victim_url, "vllm:num_requests_running")
    assert running >= 1, f"no stream runs on the victim agg_1 ({victim_url}/metrics: {running})"
    (h.manifests / f"{name}.yaml").write_text(recipe(name, h.model, workers=1, max_len=MAX_LEN, extra=DRAIN).replace("frontend: {type: builtin}\n", ROUTER))
    for s in streams:
        s.join(600)
    wait_until(lambda: "agg_1" not in h.steps(name), timeout=300, what="the victim's step gone")
    assert victim not in {sid for sid, _ in h.steps(name).values()}
    # whole: ended by the engine at max_tokens ("length"), every token counted by the engine, [DONE]
    bad = [(s.tokens, s.finish, s.done, s.error) for s in streams
           if s.error or not s.done or s.finish != "length" or s.tokens != TOKENS]
    summary(f"vllm scale-down 2 -> 1 with {len(streams)} streams of {TOKENS} tokens in flight: "
            f"{len(streams) - len(bad)} whole, {len(bad)} cut")
    assert not bad, bad
    status, body = post(endpoint + "/v1/chat/completions",
                        {"model": served, "messages": [{"role": "user", "content": "still here"}], "max_tokens": 4},
                        timeout=60)
    assert status == 200, body
