"""A bounded in-memory history of what the status page plots: request rate, TTFT/ITL percentiles
and worker counts per deployment, one sample per scrape, the last hour only.

The numbers come from the engines' own Prometheus endpoints (the units' ``metrics_path`` on
their health port, the same address the reconciler probes): counters become rates and
histogram buckets become percentiles over the interval between two scrapes, engine by engine, so
that an engine that exits (its count leaves the sum), restarts (its count starts over) or is first
seen (a new worker, or one a scrape missed) never shows as a spike.
"""

from __future__ import annotations

import threading
import time
import urllib.request
from collections import deque
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

WINDOW = 3600.0  # seconds of history kept
MAX_SAMPLES = 721  # per deployment: one hour at the 5 s minimum spacing, whatever the scrape rate
# the same quantity under each stack's name (vLLM and the mocker, SGLang, Dynamo's frontend)
REQUESTS = ("vllm:request_success", "sglang:num_requests", "dynamo_frontend_requests")
TTFT = ("vllm:time_to_first_token_seconds", "sglang:time_to_first_token_seconds",
        "dynamo_frontend_time_to_first_token_seconds")
ITL = ("vllm:inter_token_latency_seconds", "sglang:inter_token_latency_seconds",
       "dynamo_frontend_inter_token_latency_seconds")


@dataclass
class Counts:
    """One engine's cumulative values."""
    requests: float = 0.0
    ttft: dict[float, float] = field(default_factory=dict)  # bucket upper bound -> cumulative count
    itl: dict[float, float] = field(default_factory=dict)


@dataclass
class Reading:
    """Cumulative values read from one deployment's engines at one time, per engine (its URL)."""
    at: float
    engines: dict[str, Counts] = field(default_factory=dict)

    @property
    def requests(self) -> float:
        return sum(c.requests for c in self.engines.values())

    @property
    def ttft(self) -> dict[float, float]:
        return _sum(c.ttft for c in self.engines.values())

    @property
    def itl(self) -> dict[float, float]:
        return _sum(c.itl for c in self.engines.values())


def _sum(parts) -> dict[float, float]:
    out: dict[float, float] = {}
    for p in parts:
        for b, v in p.items():
            out[b] = out.get(b, 0.0) + v
    return out


def parse(text: str, into: Reading, source: str = "") -> None:
    """Add one /metrics page's counters and buckets to ``into``, as engine ``source``'s."""
    c = into.engines.setdefault(source, Counts())
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            base = s.name.removesuffix("_total").removesuffix("_bucket")
            if s.name.endswith("_bucket"):
                target = c.ttft if base in TTFT else c.itl if base in ITL else None
                if target is not None:
                    le = float(s.labels.get("le", "inf"))
                    target[le] = target.get(le, 0.0) + s.value
            elif base in REQUESTS and not s.name.endswith("_created"):
                c.requests += s.value


def quantile(buckets: dict[float, float], q: float) -> float | None:
    """Prometheus's histogram_quantile over cumulative bucket counts (linear within a bucket)."""
    if not buckets:
        return None
    bounds = sorted(buckets)
    total = buckets[bounds[-1]]
    if total <= 0:
        return None
    rank, prev_b, prev_c = q * total, 0.0, 0.0
    for b in bounds:
        c = buckets[b]
        if c >= rank:
            if b == float("inf"):
                return prev_b
            return prev_b + (b - prev_b) * ((rank - prev_c) / (c - prev_c) if c > prev_c else 0.0)
        prev_b, prev_c = b, c
    return prev_b


def _delta(new: dict[float, float], old: dict[float, float]) -> dict[float, float]:
    d = {b: new[b] - old.get(b, 0.0) for b in new}
    return new if any(v < 0 for v in d.values()) else d  # a restarted engine starts its counts over


def interval(new: Reading, old: Reading) -> tuple[float, dict[float, float], dict[float, float]]:
    """Requests, TTFT and ITL bucket counts between two readings, summed over the engines read both
    times. An engine read only now (added, relaunched on a new port, or missed by the last scrape) is
    a baseline: counting its whole count as this interval's was the spike. One that is gone (it
    exited, or this scrape missed it) adds nothing: the sum going down is not a reset of the others.
    A count that went back is the engine's new life: what it counted since it started."""
    requests, ttft, itl = 0.0, [], []
    for src, c in new.engines.items():
        p = old.engines.get(src)
        if p is None:
            continue
        dr = c.requests - p.requests
        requests += dr if dr >= 0 else c.requests
        ttft.append(_delta(c.ttft, p.ttft))
        itl.append(_delta(c.itl, p.itl))
    return requests, _sum(ttft), _sum(itl)


class History:
    def __init__(self, window: float = WINDOW) -> None:
        self.window = window
        self.samples: dict[str, deque[dict]] = {}
        self._last: dict[str, Reading] = {}
        self.lock = threading.Lock()

    def add(self, name: str, reading: Reading | None, workers: dict[str, int]) -> None:
        """One sample: rates and percentiles since the last reading, and the worker counts now."""
        at = reading.at if reading else time.time()
        sample: dict = {"t": at, "workers": workers, "rps": None}
        prev = self._last.get(name)
        if reading is not None and prev is not None and reading.at > prev.at:
            dt = reading.at - prev.at
            dr, ttft, itl = interval(reading, prev)
            sample["rps"] = round(dr / dt, 3)
            for key, d in (("ttft", ttft), ("itl", itl)):
                for q in (0.5, 0.9, 0.99):
                    v = quantile(d, q)
                    sample[f"{key}_p{int(q * 100)}"] = round(v * 1000, 3) if v is not None else None
        if reading is not None:
            self._last[name] = reading
        with self.lock:
            ring = self.samples.setdefault(name, deque(maxlen=MAX_SAMPLES))
            ring.append(sample)
            while ring and ring[0]["t"] < at - self.window:
                ring.popleft()

    def forget(self, keep: set[str]) -> None:
        with self.lock:
            for name in set(self.samples) - keep:
                del self.samples[name]
                self._last.pop(name, None)

    def series(self, name: str) -> list[dict]:
        with self.lock:
            return list(self.samples.get(name, ()))


def scrape(urls: list[str], timeout: float = 2.0) -> Reading | None:
    """Read every URL's /metrics into one Reading; None when none answered."""
    r, ok = Reading(time.time()), False
    for url in urls:
        try:
            with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 - our own units' URLs
                parse(resp.read(4 << 20).decode(errors="replace"), r, url)
                ok = True
        except (OSError, ValueError):
            continue
    return r if ok else None
