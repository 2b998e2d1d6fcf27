"""Prometheus metrics with vLLM's names, on a registry of the engine's own."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics, generate_latest

disable_created_metrics()  # the _created series are noise for scrapers of a mock

LATENCY_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
ITL_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)


class EngineMetrics:
    def __init__(self, model_name: str):
        self.registry = CollectorRegistry()
        r, labels = self.registry, ["model_name"]
        self.running = Gauge("vllm:num_requests_running", "Requests in the running batch", labels, registry=r)
        self.waiting = Gauge("vllm:num_requests_waiting", "Requests waiting to be scheduled", labels, registry=r)
        self.kv = Gauge("vllm:kv_cache_usage_perc", "KV-cache usage, 1 = 100%", labels, registry=r)
        self.preemptions = Counter("vllm:num_preemptions", "Cumulative preemptions", labels, registry=r)
        self.prompt_tokens = Counter("vllm:prompt_tokens", "Prefill tokens processed", labels, registry=r)
        self.generation_tokens = Counter("vllm:generation_tokens", "Generation tokens processed", labels, registry=r)
        self.success = Counter("vllm:request_success", "Finished requests", labels + ["finished_reason"], registry=r)
        self.prefix_q = Counter("vllm:prefix_cache_queries", "Prompt tokens looked up in the prefix cache", labels, registry=r)
        self.prefix_h = Counter("vllm:prefix_cache_hits", "Prompt tokens found in the prefix cache", labels, registry=r)
        self.ttft = Histogram("vllm:time_to_first_token_seconds", "Time to first token", labels, buckets=LATENCY_BUCKETS, registry=r)
        self.itl = Histogram("vllm:inter_token_latency_seconds", "Inter-token latency", labels, buckets=ITL_BUCKETS, registry=r)
        self.e2e = Histogram("vllm:e2e_request_latency_seconds", "End-to-end request latency", labels, buckets=LATENCY_BUCKETS, registry=r)
        m = model_name
        self._running, self._waiting, self._kv = self.running.labels(m), self.waiting.labels(m), self.kv.labels(m)
        self._pre, self._gen, self._prompt = self.preemptions.labels(m), self.generation_tokens.labels(m), self.prompt_tokens.labels(m)
        self._ttft, self._itl, self._e2e = self.ttft.labels(m), self.itl.labels(m), self.e2e.labels(m)
        self._pq, self._ph = self.prefix_q.labels(m), self.prefix_h.labels(m)
        self._model = m

    def step(self, running: int, waiting: int, kv: float) -> None:
        self._running.set(running)
        self._waiting.set(waiting)
        self._kv.set(kv)

    def preempted(self) -> None:
        self._pre.inc()

    def tokens(self, n: int) -> None:
        self._gen.inc(n)

    def first_token(self, secs: float) -> None:
        self._ttft.observe(secs)

    def inter_token(self, secs: float) -> None:
        self._itl.observe(secs)

    def prefix_queries(self, queried: int, hit: int) -> None:
        self._pq.inc(queried)
        self._ph.inc(hit)

    def finished(self, secs: float, prompt_tokens: int, reason: str) -> None:
        self._e2e.observe(secs)
        self._prompt.inc(prompt_tokens)
        self.success.labels(self._model, reason).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
