"""One benchmark run's summary from aiperf's export, and whether it counts (pure).

A run is ``Succeeded`` only when every level produced output: srtctl once reported a
benchmark as a success with 0 output tokens after an RDMA failure (srt-slurm#429), so a
level with no output tokens, an error rate above the policy's threshold, or answers shorter
than the ``osl`` asked for (every request is sent with ``ignore_eos``) fails the run, with
the reason. The summary's headline figures are the last (highest-concurrency) level's.
"""

from __future__ import annotations

import json
from typing import Any

SUCCEEDED, FAILED, CANCELLED = "Succeeded", "Failed", "Cancelled"
HEADLINE = ("req_s", "output_tok_s", "ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms", "itl_p99_ms")


def _stat(doc: dict[str, Any], metric: str, stat: str = "avg") -> float | None:
    v = doc.get(metric)
    if isinstance(v, dict) and isinstance(v.get(stat), (int, float)):
        return float(v[stat])
    return None


def level_summary(doc: dict[str, Any], concurrency: int) -> dict[str, Any]:
    """The figures of one aiperf run (its profile_export_aiperf.json)."""
    completed = _stat(doc, "completed_request_count") or _stat(doc, "request_count") or 0.0
    errors = _stat(doc, "error_request_count")
    if errors is None:  # aiperf writes the rate, in percent, when it has no count
        errors = round((_stat(doc, "request_error_rate") or 0.0) * completed / 100)
    return {
        "concurrency": concurrency,
        "requests": int(completed),
        "errors": int(errors),
        "req_s": _stat(doc, "request_throughput"),
        "output_tok_s": _stat(doc, "output_token_throughput"),
        "ttft_p50_ms": _stat(doc, "time_to_first_token", "p50"),
        "ttft_p90_ms": _stat(doc, "time_to_first_token", "p90"),
        "ttft_p99_ms": _stat(doc, "time_to_first_token", "p99"),
        "itl_p50_ms": _stat(doc, "inter_token_latency", "p50"),
        "itl_p99_ms": _stat(doc, "inter_token_latency", "p99"),
        "output_tokens": int(_stat(doc, "total_output_tokens") or 0),
        "osl_min": _stat(doc, "output_sequence_length", "min"),
        "duration_s": _stat(doc, "benchmark_duration"),
    }


def records_summary(lines: list[str], concurrency: int) -> dict[str, Any] | None:
    """The figures aiperf's per-request records give when it wrote no summary (it exits 1 when no
    request produced content: exactly the runs that must fail with the reason); None without records."""
    sent = errors = tokens = 0
    causes: dict[str, int] = {}
    for line in lines:
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if (rec.get("metadata") or {}).get("benchmark_phase") != "profiling":
            continue
        sent += 1
        tokens += int(((rec.get("metrics") or {}).get("output_token_count") or {}).get("value") or 0)
        if rec.get("error"):
            errors += 1
            msg = str(rec["error"].get("message") or rec["error"].get("type"))[:200]
            causes[msg] = causes.get(msg, 0) + 1
    if not sent:
        return None
    out: dict[str, Any] = {"concurrency": concurrency, "requests": sent, "errors": errors, "output_tokens": tokens,
                           "osl_min": None, **{k: None for k in HEADLINE}}
    if causes:
        out["error"] = max(causes, key=lambda k: causes[k])
    return out


def verdict(levels: list[dict[str, Any]], osl: int, max_error_rate: float) -> tuple[str, str]:
    """(status, reason): the first level that does not count fails the run."""
    for lv in levels:
        at = f"at concurrency {lv['concurrency']}"
        if lv.get("failed"):
            return FAILED, f"{at}: {lv['failed']}"
        sent = lv["requests"]
        why = f" ({lv['error']})" if lv.get("error") else ""
        if lv["output_tokens"] == 0:
            return FAILED, f"{at}: 0 output tokens in {sent} requests{why}"
        if sent and lv["errors"] / sent > max_error_rate:
            return FAILED, (f"{at}: {lv['errors']} of {sent} requests failed "
                            f"({100 * lv['errors'] / sent:.1f}% > max_error_rate {100 * max_error_rate:g}%){why}")
        if lv["osl_min"] is not None and lv["osl_min"] < osl:
            return FAILED, f"{at}: output shorter than requested (a request got {lv['osl_min']:g} tokens, osl {osl})"
    if not levels:
        return FAILED, "no level ran"
    return SUCCEEDED, ""


def summarize(levels: list[dict[str, Any]], meta: dict[str, Any], osl: int, max_error_rate: float) -> dict[str, Any]:
    """The run's summary: ``meta`` (who, when, what was measured), the verdict, the headline, the levels."""
    status, reason = verdict(levels, osl, max_error_rate)
    last = levels[-1] if levels else {}
    return {**meta, "status": status, "reason": reason,
            **{k: last.get(k) for k in HEADLINE},
            "errors": sum(lv.get("errors", 0) for lv in levels),
            "output_tokens": sum(lv.get("output_tokens", 0) for lv in levels),
            "levels": levels}
