"""The status page's pure parts: metric parsing, percentiles, the bounded history, the SVG charts."""

from __future__ import annotations

import math

import pytest

from reconciler.ui import history, svg
from reconciler.ui.history import History, Reading, parse, quantile

PAGE = """\
# TYPE vllm:request_success_total counter
vllm:request_success_total{{model_name="m",finished_reason="stop"}} {n}
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{{le="0.01",model_name="m"}} {a}
vllm:time_to_first_token_seconds_bucket{{le="0.1",model_name="m"}} {b}
vllm:time_to_first_token_seconds_bucket{{le="+Inf",model_name="m"}} {b}
vllm:time_to_first_token_seconds_count{{model_name="m"}} {b}
vllm:time_to_first_token_seconds_sum{{model_name="m"}} 1.0
"""


def reading(at: float, n: float, a: float, b: float) -> Reading:
    r = Reading(at)
    parse(PAGE.format(n=n, a=a, b=b), r)
    return r


def test_parse_sums_counters_and_buckets_across_engines():
    r = Reading(0.0)
    parse(PAGE.format(n=3, a=1, b=3), r)
    parse(PAGE.format(n=4, a=2, b=4), r)
    assert r.requests == 7 and r.ttft == {0.01: 3, 0.1: 7, math.inf: 7} and r.itl == {}


def test_quantile_interpolates_within_a_bucket_as_prometheus_does():
    assert quantile({0.01: 0, 0.1: 10, math.inf: 10}, 0.5) == pytest.approx(0.01 + 0.09 * 0.5)
    assert quantile({0.01: 10, math.inf: 10}, 0.99) == pytest.approx(0.01 * 0.99)
    assert quantile({}, 0.5) is None and quantile({0.1: 0, math.inf: 0}, 0.5) is None


def test_history_rates_and_percentiles_over_the_interval_and_a_restarted_engine():
    h = History(window=100)
    h.add("d", reading(0, 10, 5, 10), {"agg": 2})
    h.add("d", reading(10, 30, 5, 30), {"agg": 2})  # 20 requests in 10 s, all of them in (0.01, 0.1]
    s = h.series("d")
    assert s[0]["rps"] is None and s[1]["rps"] == 2.0
    assert 10 < s[1]["ttft_p50"] < 100 and s[1]["workers"] == {"agg": 2}
    h.add("d", reading(20, 4, 4, 4), {"agg": 1})  # counters went back: a new life counts from 0
    assert h.series("d")[-1]["rps"] == 0.4
    h.add("d", reading(200, 4, 4, 4), {"agg": 1})
    assert [x["t"] for x in h.series("d")] == [200]  # older than the window: dropped
    h.forget(set())
    assert h.series("d") == []


def test_history_is_bounded_whatever_the_rate():
    h = History(window=1e9)
    for i in range(history.MAX_SAMPLES + 50):
        h.add("d", None, {})
    assert len(h.series("d")) == history.MAX_SAMPLES


def test_charts_are_self_contained_svg():
    samples = [{"t": 1000 + i, "rps": float(i), "ttft_p50": None, "workers": {"agg": 2}} for i in range(5)]
    out = svg.plots(samples, now=1010)
    assert set(out) == {"requests", "ttft", "itl", "workers"}
    assert out["requests"].startswith("<svg") and "<polyline" in out["requests"]
    assert "no data yet" in out["ttft"] and "http" not in out["ttft"].replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "&lt;b&gt;" in svg.line_chart("<b>", {}, 0, 10)  # titles are escaped


def _engines(at: float, **counts: float) -> Reading:
    r = Reading(at)
    for url, n in counts.items():
        parse(PAGE.format(n=n, a=n, b=n), r, url)
    return r


def test_a_worker_that_exits_a_restart_or_a_new_worker_is_never_a_spike():
    """Issue 46: ~155 req/s plotted during a scale-down with no traffic. Per engine: one leaving
    adds nothing, one restarting counts its new life, one first seen is a baseline."""
    h = History(window=1e9)
    h.add("d", _engines(0, a=1000, b=1000), {})
    h.add("d", _engines(10, a=1010), {})  # b exited (scale-down): the sum fell by 990
    assert h.series("d")[-1]["rps"] == 1.0
    h.add("d", _engines(20, a=3), {})  # a restarted: 3 requests in its new life
    assert h.series("d")[-1]["rps"] == 0.3
    h.add("d", _engines(30, a=13, c=5000), {})  # c added (or a scrape had missed it): its past is not now
    assert h.series("d")[-1]["rps"] == 1.0
    h.add("d", _engines(40, a=13, c=5000), {})  # no traffic, no rate
    assert h.series("d")[-1]["rps"] == 0.0
    h.add("d", _engines(50, a=13, c=5020), {})
    s = h.series("d")[-1]
    assert s["rps"] == 2.0 and s["ttft_p50"] is not None
