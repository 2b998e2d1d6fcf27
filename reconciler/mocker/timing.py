"""The step timing model (facts from Dynamo's mocker), in milliseconds."""

from __future__ import annotations


def prefill_ms(new_tokens: int) -> float:
    """Prefill time of a step that processes ``new_tokens`` prompt tokens in the batch."""
    if new_tokens <= 0:
        return 0.0
    t = float(new_tokens)
    return 4.209989e-07 * t * t + 1.518344e-02 * t + 1.650142e01


def decode_ms(kv_fraction: float) -> float:
    """Decode time of a step with ``kv_fraction`` = active KV blocks / total blocks."""
    p = min(max(kv_fraction, 0.0), 1.0)
    return max(1.0, -25.74 * p * p + 54.01 * p + 5.74)


def step_seconds(new_tokens: int, decoding: bool, kv_fraction: float, speedup: float, decode_speedup: float = 1.0) -> float:
    """Wall time of one scheduler step; speedup 0 means no simulated delay."""
    if speedup <= 0:
        return 0.0
    ms = prefill_ms(new_tokens)
    if decoding:
        ms += decode_ms(kv_fraction) / max(decode_speedup, 1e-9)
    return ms / speedup / 1000.0
