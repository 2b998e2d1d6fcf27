"""The benchmark's unit source: the recipe's srtctl ``benchmark:`` section as one run-once step
(``svc-benchmark_0``) on the head node, when ``reconcile.benchmark`` asks for it.

The step is ``python -m reconciler.benchrun`` (aiperf per concurrency, then a summary and a
verdict in ``state/<recipe>/benchmarks/``), pointed at the deployment's endpoint
(``endpoint``: the one place that decides it). It runs on the host, not in the job's
container: aiperf lives in its own venv. Being one unit, at most one run per deployment is in
flight. What makes it run-once rather than restarted is in the core: ``Unit.run_once`` holds its
start until the recipe is settled (``core/plan/placement.py:settled``) and its restart policy
``once`` (``core/plan/relaunch.py:once_gate``) never restarts a run that ended; it runs again when
its spec changes (the ``--subject`` argument: the spec hashes of everything it measures, so a
rollout changes it) with ``on: [rollout]``, or ``every`` after the last run ended.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from reconciler.desired.bench_map import bench_plan
from reconciler.desired.context import Context
from reconciler.desired.sources.base import Life, Offer
from reconciler.recipe.bench_policy import duration_seconds
from reconciler.world import FRONTEND, SERVICE_PREFIX, Launch, RestartPolicy, Unit

ROLE = f"{SERVICE_PREFIX}benchmark"


def endpoint(earlier: tuple[Unit, ...]) -> str | None:
    """The URL a benchmark measures: the first frontend, else the first worker (a recipe served by
    its workers directly). The gateway, when it fronts the deployment, is to be named here only."""
    fronts = [u for u in earlier if u.role == FRONTEND and u.index == 0]
    workers = [u for u in earlier if not u.is_service and u.role != FRONTEND]
    for u in fronts or workers[:1]:
        return u.url
    return None


def subject(earlier: tuple[Unit, ...]) -> str:
    """What is measured: a hash of every unit's spec hash (a rollout of any of them changes it)."""
    specs = sorted(f"{u.role}_{u.index}={u.spec_hash}" for u in earlier if not u.run_once)
    return hashlib.sha256("\n".join(specs).encode()).hexdigest()[:16]


def offer(ctx: Context, earlier: tuple[Unit, ...]) -> Offer:
    recipe, where = ctx.recipe, ctx.where
    policy = recipe.reconcile.benchmark
    plan = bench_plan(recipe.benchmark) if policy is not None else None
    if policy is None or plan is None:
        return Offer()
    restart = {ROLE: RestartPolicy(policy="once", on_change="rollout" in policy.on,
                                   every_seconds=duration_seconds(policy.every) if policy.every else None)}
    url = endpoint(earlier)
    if where.head is None or url is None:
        return Offer(waiting=((ROLE, 0),), restart=restart)
    model = recipe.model.path.removeprefix("hf:")
    name = ctx.runtime.served_model_name
    spec = {"type": plan.type, "isl": plan.isl, "osl": plan.osl, "max_error_rate": policy.max_error_rate,
            "timeout": policy.timeout_seconds,
            "levels": [{"concurrency": lv.concurrency, "args": plan.aiperf_args(lv, name, model)} for lv in plan.levels]}
    out = Path(ctx.state_dir).absolute() / recipe.name / "benchmarks"
    argv = (ctx.runtime.python, "-m", "reconciler.benchrun", "--url", url, "--out", str(out),
            "--subject", subject(earlier), "--plan", json.dumps(spec, sort_keys=True))
    head = where.head
    # its own definition (not what it measures): a changed benchmark section runs again, rollouts or not
    run_key = hashlib.sha256(json.dumps([url, spec]).encode()).hexdigest()[:16]

    def build(slot: int) -> Unit:
        launch = Launch(0, (head,), 1, None, argv, (("PYTHONUNBUFFERED", "1"),))
        return Unit(recipe=recipe.name, role=ROLE, index=0, ordinals=(0,), nodes=(head,), gpus=(), ports={},
                    launches=(launch,), container=None, probe="started", phase="after_frontend", run_once=True,
                    run_key=run_key)

    return Offer((Life((ROLE, 0), build),), job_of={(ROLE, 0): where.head_job or ""}, restart=restart)
