"""``reconcile.rollout.analysis`` resolved once per build (pure): the runner's plan — the same
``reconciler.benchrun`` the benchmark step runs, one aiperf level at the analysis' load — and the
bars the new life is judged by (core/plan/analysis.py). The URL is not in it: the shell points
the runner at the life being measured (its own address, never the router's or the gateway's)."""

from __future__ import annotations

import json

from reconciler.backends.registry import backend_for
from reconciler.desired.bench_map import BenchPlan, Level
from reconciler.desired.context import Context
from reconciler.errors import KeyedError
from reconciler.recipe.model import Recipe
from reconciler.world import Analysis


def check(recipe: Recipe) -> None:
    """A worker is measured at its own address: one that serves no OpenAI API of its own (a Dynamo
    worker, reached only through its frontend, answers just health on its system port) would fail
    every rollout for a reason that is not its own. Refused at validate, with why."""
    if recipe.reconcile.rollout.analysis is None:
        return
    for mode in recipe.role_layouts():
        if backend_for(recipe, mode).health_probe(mode).kind != "http":
            raise KeyedError("reconcile.rollout.analysis", f"analysis measures each worker at its own address, and "
                             f"the {mode} workers serve no OpenAI API of their own (Dynamo workers are reached only "
                             "through the Dynamo frontend); only engines that serve HTTP themselves can be analysed")


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
