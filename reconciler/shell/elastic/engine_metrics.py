"""What the autoscaler reads from an engine's Prometheus page: one table of names per stack.

The mocker exports vLLM's names. Each quantity is looked up under every stack's name; a page
carries one stack's, so the first found counts. TRT-LLM (1.1, through Dynamo's ``trtllm_``
prefix) exports no queue, running or KV gauge: only its latency histograms and request counter
are read, and a role sized on ``waiting_per_worker`` there sees no queue (docs/operations.md).
Parsing and the arithmetic are pure; the scrape itself is ``shell/elastic/autoscale.py``'s.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

NAMES: dict[str, tuple[str, ...]] = {
    # requests queued in the engine's scheduler
    "waiting": ("vllm:num_requests_waiting", "sglang:num_queue_reqs", "dynamo_frontend_queued_requests"),
    # requests in the running batch
    "running": ("vllm:num_requests_running", "sglang:num_running_reqs", "dynamo_frontend_inflight_requests"),
    # KV-cache usage, 0..1
    "kv_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage",
                 "dynamo_component_kvstats_gpu_cache_usage_percent"),
    # histograms, seconds
    "ttft": ("vllm:time_to_first_token_seconds", "sglang:time_to_first_token_seconds",
             "trtllm_time_to_first_token_seconds", "dynamo_frontend_time_to_first_token_seconds"),
    "itl": ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds",
            "sglang:inter_token_latency_seconds", "trtllm_time_per_output_token_seconds",
            "dynamo_frontend_inter_token_latency_seconds"),
    # finished requests, a counter (a frontend's: every request it answered, the built-in router's too)
    "requests": ("vllm:request_success", "sglang:num_requests", "trtllm_request_success",
                 "dynamo_frontend_requests", "router_requests"),
}
_GAUGES = ("waiting", "running", "kv_usage")
_HISTOGRAMS = ("ttft", "itl")
_LOOKUP = {name: (q, rank) for q, names in NAMES.items() for rank, name in enumerate(names)}


@dataclass
class Reading:
    """One worker's page: gauges, cumulative histogram buckets (upper bound -> count), the counter."""

    gauges: dict[str, float] = field(default_factory=dict)
    buckets: dict[str, dict[float, float]] = field(default_factory=dict)
    requests: float = 0.0


def parse(text: str) -> Reading:
    """A /metrics page (Prometheus text) into a Reading; series of one name are summed (labels)."""
    out = Reading()
    best: dict[str, int] = {}  # quantity -> the rank of the name that gave it (the first stack's wins)
    for fam in text_string_to_metric_families(text):
        hit = _LOOKUP.get(fam.name) or _LOOKUP.get(fam.name.removesuffix("_total"))
        if hit is None:
            continue
        q, rank = hit
        if best.setdefault(q, rank) != rank:
            continue
        for s in fam.samples:
            if q in _HISTOGRAMS and s.name.endswith("_bucket"):
                le = float(s.labels.get("le", "inf"))
                b = out.buckets.setdefault(q, {})
                b[le] = b.get(le, 0.0) + s.value
            elif q in _GAUGES:
                out.gauges[q] = out.gauges.get(q, 0.0) + s.value
            elif q == "requests" and not s.name.endswith("_created"):
                out.requests += s.value
    return out


def quantile(buckets: dict[float, float], q: float) -> float | None:
    """Prometheus's histogram_quantile over cumulative counts (linear within a bucket)."""
    bounds = sorted(buckets)
    if not bounds or buckets[bounds[-1]] <= 0:
        return None
    rank, prev_b, prev_c = q * buckets[bounds[-1]], 0.0, 0.0
    for b in bounds:
        c = buckets[b]
        if c >= rank:
            if b == float("inf"):
                return prev_b  # above the highest finite bound: that bound, as Prometheus does
            return prev_b + (b - prev_b) * ((rank - prev_c) / (c - prev_c) if c > prev_c else 1.0)
        prev_b, prev_c = b, c
    return prev_b


def delta(now: dict[float, float], before: dict[float, float] | None) -> dict[float, float]:
    """Bucket counts of the interval; a counter that went back (a restarted engine) counts from 0."""
    if not before or any(now.get(b, 0.0) < c for b, c in before.items()):
        return dict(now)
    return {b: c - before.get(b, 0.0) for b, c in now.items()}


def p90_ms(readings: list[tuple[Reading, Reading | None]], what: str) -> float | None:
    """The role's 90th percentile over the interval, in ms: every worker's interval buckets summed."""
    total: dict[float, float] = {}
    for now, before in readings:
        for b, c in delta(now.buckets.get(what, {}), before.buckets.get(what) if before else None).items():
            total[b] = total.get(b, 0.0) + c
    v = quantile(total, 0.9)
    return None if v is None else v * 1000.0


def requests_since(now: Reading, before: Reading | None) -> float:
    if before is None:
        return 0.0
    return now.requests - before.requests if now.requests >= before.requests else now.requests
