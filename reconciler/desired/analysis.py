"""``reconcile.rollout.analysis`` resolved once per build (pure): the runner's plan — the same
``reconciler.benchrun`` the benchmark step runs, one aiperf level at the analysis' load — and the
bars the new life is judged by (core/plan/analysis.py). The URL is not in it: the shell points
the runner at the life being measured (its own address, never the router's or the gateway's)."""

from __future__ import annotations

import json

from reconciler.desired.bench_map import BenchPlan, Level
from reconciler.desired.context import Context
from reconciler.world import Analysis


def analysis_spec(ctx: Context) -> Analysis | None:
    a = ctx.recipe.reconcile.rollout.analysis
    if a is None:
        return None
    load = a.benchmark
    bench = BenchPlan("rollout-analysis", load.isl, load.osl, "inf", ())
    level = Level(load.concurrency, load.requests, load.warmup)
    tokenizer = ctx.recipe.model.path.removeprefix("hf:")
    plan = {"type": bench.type, "isl": load.isl, "osl": load.osl, "max_error_rate": a.max_error_rate,
            "timeout": a.timeout_seconds,
            "levels": [{"concurrency": load.concurrency,
                        "args": bench.aiperf_args(level, ctx.runtime.served_model_name, tokenizer)}]}
    return Analysis(json.dumps(plan, sort_keys=True), a.max_ttft_p90_ms, a.min_throughput_ratio)
