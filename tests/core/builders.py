"""Hand-built desired and observed values for the core's table tests (no YAML, no backends)."""

from __future__ import annotations

from reconciler.world import FRONTEND, Launch, Unit
from reconciler.world import (
    Alloc, AllocSpec, Desired, DesiredRecipe, Observed, RestartPolicy, Step, UnitHealth,
)
from reconciler.core.plan import plan

R = "r"
JOB = "100"


def unit(role: str = "agg", index: int = 0, spec: str = "new", ranks: int = 1, recipe: str = R) -> Unit:
    nodes = tuple(f"n{index}-{k}" for k in range(ranks))
    launches = tuple(Launch(k, (nodes[k],), 1, None, ("worker", role, str(index)), ()) for k in range(ranks))
    return Unit(recipe=recipe, role=role, index=index, ordinals=tuple(range(ranks)), nodes=nodes, gpus=(0,),
                ports={"http": 20000 + index}, launches=launches, container=None, health_port=20000 + index,
                spec_hash=spec)


def service(name: str, phase: str, spec: str = "svc", timeout: float | None = None, recipe: str = R) -> Unit:
    from dataclasses import replace

    return replace(unit(f"svc-{name}", 0, spec, recipe=recipe), phase=phase, probe="tcp", startup_timeout=timeout)


def frontend(spec: str = "fe", recipe: str = R) -> Unit:
    return unit(FRONTEND, 0, spec, recipe=recipe)


def desired_recipe(*units: Unit, waiting=(), fe: Unit | None = None, max_unavailable: int = 1,
                   restart: dict | None = None, startup_grace: float = 30.0, liveness_failures: int = 2,
                   allocs=(0,), keep=(JOB,), name: str = R, unplaceable=(), pending_reason: str = "",
                   services=()) -> DesiredRecipe:
    job_of = {(u.role, u.index): JOB for u in (*units, *services)}
    gates: dict[str, tuple[str, ...]] = {}
    for s in services:
        gates[s.phase] = (*gates.get(s.phase, ()), s.role)
    if fe is not None:
        job_of[(FRONTEND, 0)] = JOB
    return DesiredRecipe(
        name=name, generation="g", allocs=tuple(AllocSpec(name, i, i, 1, 8) for i in allocs), keep_allocs=tuple(keep),
        units=tuple(units), waiting=tuple(waiting), frontend=fe, max_unavailable=max_unavailable,
        unplaceable={n: "delete and re-create the recipe to re-pack it" for n in unplaceable}, job_of=job_of, pending_reason=pending_reason,
        restart=restart or {}, startup_grace=startup_grace, liveness_failures=liveness_failures,
        services=tuple(services), gates=gates,
    )


def desired(*recipes: DesiredRecipe, held=None, manifests_seen: int | None = None, allow_empty=False) -> Desired:
    seen = len(recipes) + len(held or {}) if manifests_seen is None else manifests_seen
    return Desired({d.name: d for d in recipes}, seen, dict(held or {}), allow_empty)


def step(role: str = "agg", index: int = 0, spec: str = "new", rank: int = 0, num: int | None = None,
         job: str = JOB, recipe: str = R, **kw) -> Step:
    n = num if num is not None else index * 10 + rank
    return Step(f"{job}.{n}", recipe, role, index, rank, spec, (f"n{index}-{rank}",), **kw)


def alloc(index: int = 0, job: str = JOB, state: str = "RUNNING", recipe: str = R, reason: str = "None",
          submitted: float | None = None) -> Alloc:
    return Alloc(job, recipe, index, index, 1, state, reason, (f"n{index}",) if state == "RUNNING" else (),
                 submitted=submitted)


def observed(*steps: Step, allocs=None, ready=(), health=None, failures=None) -> Observed:
    allocs = (alloc(),) if allocs is None else tuple(allocs)
    return Observed(allocs, tuple(steps), {(R, r, i): True for r, i in ready},
                    {(R, r, i): h for (r, i), h in (health or {}).items()}, dict(failures or {}))


def life(launches: int = 1, restarts: int = 0, launched: float = 0.0, exit=None, missing=None, **kw) -> UnitHealth:
    return UnitHealth(launches=launches, restarts=restarts, last_launch=launched, last_exit=exit,
                      missing_since=missing, **kw)


__all__ = ["RestartPolicy", "alloc", "service", "desired", "desired_recipe", "frontend", "life", "observed", "step", "unit"]


def sets(rp) -> dict:
    """The recipe plan as comparable named sets."""
    return {
        "submit": tuple(a.spec.index for a in rp.submit),
        "release": tuple(a.job_id for a in rp.release),
        "place": tuple((a.unit.name, a.launch.rank, a.reason.name, a.restart) for a in rp.place),
        "stop": tuple((a.step_id, a.reason.name) for a in rp.stop),
        "replace": tuple(a.step_id for a in rp.replace),
        "later": dict(rp.relaunch_later),
        "waiting": {u: w.reason.name for u, w in rp.waiting.items()},
    }


def expect(**kw) -> dict:
    base = {"submit": (), "release": (), "place": (), "stop": (), "replace": (), "later": {}, "waiting": {}}
    return {**base, **{k: (tuple(v) if isinstance(v, list) else v) for k, v in kw.items()}}


def run(d, o, now: float = 100.0):
    p = plan(desired(d), o, now)
    return p, p.recipes[d.name]
