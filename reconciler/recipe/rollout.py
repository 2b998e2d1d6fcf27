"""``reconcile.rollout``: how a spec change replaces workers, and ``rollout.analysis``: a surging
worker's new life is measured before it takes requests, and replaces the old life only if it
passes (reconciler/core/plan/analysis.py decides, reconciler/shell/gates/analysis_runs.py measures). Every
number is bounded: a typo must not start a benchmark of a million requests against a deployment
that serves users."""

from __future__ import annotations

from pydantic import Field, model_validator

from reconciler.errors import KeyedError
from reconciler.recipe.bounds import MAX_WORKERS
from reconciler.recipe.types import Strict

MAX_CONCURRENCY = 1024
MAX_REQUESTS = 100_000
MAX_LENGTH = 131_072  # isl / osl, tokens


class AnalysisLoad(Strict):
    """The load each life is measured with (aiperf, synthetic prompts of fixed lengths)."""

    concurrency: int = Field(8, ge=1, le=MAX_CONCURRENCY)
    requests: int = Field(200, ge=1, le=MAX_REQUESTS)
    warmup: int = Field(0, ge=0, le=MAX_REQUESTS)  # requests sent first and not counted
    isl: int = Field(128, ge=1, le=MAX_LENGTH)
    osl: int = Field(64, ge=1, le=MAX_LENGTH)

    @model_validator(mode="after")
    def _enough(self) -> "AnalysisLoad":
        if self.requests < self.concurrency:
            raise ValueError(f"requests ({self.requests}) must be at least concurrency ({self.concurrency}): "
                             "fewer would never load the life at that concurrency")
        return self


class RolloutAnalysis(Strict):
    """What a new life must show. ``min_throughput_ratio``: its output tokens/s over the old life's
    (measured the same way); ``max_ttft_p90_ms``: its time to first token, p90. A run that is not
    valid (0 output tokens, errors above ``max_error_rate``, short answers) fails whatever the figures."""

    benchmark: AnalysisLoad = AnalysisLoad()
    max_ttft_p90_ms: float | None = Field(None, gt=0, le=3_600_000)
    min_throughput_ratio: float | None = Field(None, gt=0, le=10)
    max_error_rate: float = Field(0.0, ge=0.0, le=1.0)
    timeout_seconds: float = Field(600.0, ge=10.0, le=7200.0)  # one life's measurement, warm-up included


class RolloutConfig(Strict):
    """A spec change replaces workers: ``max_surge`` new lives start beside the old ones (on their
    own ports) and an old one stops once its successor is Ready and routed; with ``max_surge: 0``
    the old one stops first, ``max_unavailable`` at a time."""

    max_surge: int = Field(1, ge=0, le=64)
    max_unavailable: int = Field(0, ge=0, le=MAX_WORKERS)  # more than a role can have means nothing
    pickup_seconds: float = Field(2.0, ge=0, le=600)  # a Ready surge life is routed this long before the old leaves
    drain_seconds: float = Field(3.0, ge=0, le=3600)  # the old life, out of the routers, finishes its requests
    # allocations hold twice the GPUs the workers use on a node (up to the node's), so that a GPU
    # engine's surge life has GPUs of its own; without it such workers are rolled in place
    surge_gpus: bool = False
    analysis: RolloutAnalysis | None = None  # a surge life is measured and replaces the old one only if it passes

    @model_validator(mode="after")
    def _progress(self) -> "RolloutConfig":
        if self.max_surge == 0 and self.max_unavailable == 0:
            raise ValueError("max_surge and max_unavailable cannot both be 0: a rollout could never progress")
        if self.analysis is not None and self.max_surge == 0:
            raise ValueError("analysis needs max_surge >= 1: the new life is measured beside the old one")
        return self


def check(recipe) -> None:
    """Analysis measures a worker alone at its own address: a disaggregated recipe's prefill worker
    answers with a KV handle, not tokens, and its decode worker needs one (srtctl's prefill/decode
    roles), so either would fail every rollout for a reason that is not its own. Refused, with why."""
    if recipe.reconcile.rollout.analysis is None:
        return
    split = [r for r in recipe.role_layouts() if r in ("prefill", "decode")]
    if split:
        raise KeyedError("reconcile.rollout.analysis", f"analysis measures one worker alone at its own address, "
                         f"and a {split[0]} worker does not answer a request by itself (a disaggregated recipe); "
                         "only agg roles can be analysed for now")
