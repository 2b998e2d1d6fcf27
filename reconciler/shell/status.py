"""A recipe's status: conditions and one row per worker. Pure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from reconciler.core.plan import RecipePlan, WaitReason
from reconciler.core.plan import stop as serve_rules
from reconciler.core.plan.results import StopReason
from reconciler.timefmt import iso
from reconciler.core.plan.classify import unit_order
from reconciler.world import FRONTEND, is_service_role, life_name
from reconciler.world import DesiredRecipe, Observed

ROLES = ("prefill", "decode", "agg")
# a unit waiting for one of these is part of a change being rolled out (Progressing), not stuck
MOVING = frozenset({
    WaitReason.ALLOCATION_PENDING, WaitReason.ROLLOUT_BUDGET, WaitReason.RESIZING, WaitReason.TERMINATING,
    WaitReason.DRAINING, WaitReason.SURGE_STARTING, WaitReason.SURGE_HANDOVER, WaitReason.SURGE_ALLOCATION,
    WaitReason.ANALYSING, WaitReason.NEEDS_READY_WORKER, WaitReason.NEEDS_SERVICES, WaitReason.NEEDS_READY_FRONTEND,
})


def build_status(
    name: str, d: DesiredRecipe | None, o: Observed, rp: RecipePlan | None, invalid: str | None, prev: dict,
    launches: dict[str, dict], now: float, exits: dict[str, tuple[int, float]] | None = None,
    gateway: dict | None = None,
) -> dict[str, Any]:
    """Conditions and worker rows from the desired state and the plan's named results (``rp``).
    ``gateway``: the deployment's gateway as the shell found it (``shell/gateway/record.py:facts``): its URL
    is the endpoint, and the recipe is Ready only while it runs. The facts every condition reads
    are gathered once (``_Facts``); each condition, in the order Kubernetes gives them, is then
    one function of them."""
    rp = rp or RecipePlan(name)
    rows = worker_rows(name, d, o, rp, launches, exits or {}) if d else []
    f = _facts(name, d, o, rp, rows, gateway)

    def cond(kind: str, status: bool, reason: str, message: str) -> dict:
        old = next((c for c in prev.get("conditions", []) if c["type"] == kind), None)
        value = "True" if status else "False"
        since = old["lastTransitionTime"] if old and old["status"] == value else iso(now)
        return {"type": kind, "status": value, "reason": reason, "message": message,
                "lastTransitionTime": since, "observedGeneration": d.generation if d else None}

    conds = [cond("Ready", *_ready(f, gateway)),
             cond("Available", *availability(d, f.workers, f.fe_rows, f.zero, f.gateway_up and f.gateway_routes)),
             cond("Progressing", *_progressing(f, d, now)),
             cond("Degraded", *_degraded(f, launches)),
             cond("Invalid", invalid is not None, "InvalidSpec" if invalid else "Valid",
                  (invalid + ("; still running the last applied spec" if d else "")) if invalid
                  else "the recipe file validates")]
    phase = ("Invalid" if invalid and d is None else "Suspended" if f.suspended else "Ready" if f.all_ready
             else "ScaledToZero" if f.zero
             else "Degraded" if (f.stalled and not f.pending_actions) or f.refused else "Progressing")
    return {
        "name": name,
        "phase": phase,
        "observedGeneration": d.generation if d else None,
        # AGE counts from this life of the deployment: a recipe made again after a delete starts at 0
        "createdAt": (prev.get("createdAt") if prev.get("phase") != "Deleted" else None) or iso(now),
        "updatedAt": iso(now),
        "conditions": conds,
        "roles": role_counts(rp, rows),
        # kubectl's READY / UP-TO-DATE / AVAILABLE, over the engine workers
        "replicas": {"desired": f.want, "ready": f.ready, "upToDate": f.updated,
                     "available": sum(r["available"] for r in f.workers)},
        "endpoint": gateway["url"] if gateway and (f.fe or f.zero) else (f.fe["url"] if f.fe else None),
        # what clients send as "model": kept from the last spec while the file is invalid or missing
        "servedModel": d.served_model if d else prev.get("servedModel"),
        "workers": rows,
        "pendingAllocations": [p.doc(now) for p in f.pending],
    }


@dataclass(frozen=True)
class _Facts:
    """What the conditions read of one recipe, gathered once."""

    workers: list[dict]        # the engine workers' rows
    services: list[dict]       # the services' rows
    fe_rows: list[dict]        # the frontends' rows
    fe: dict | None            # the frontend that stands for them all: the first Ready one, else the first
    ready: int                 # engine workers Ready
    want: int                  # engine workers wanted
    updated: int               # engine workers on the current spec
    services_up: bool          # every critical service Ready (the rest make it Degraded only)
    pending: list              # Slurm's reason and expected start per pending allocation (core/plan/pending.py)
    refused: list[str]         # units whose rollout analysis refused the new spec
    pending_actions: list      # what the plan does (or defers) this pass
    suspended: bool
    failed: list[str]          # workers down for good (restart policy)
    stalled: bool              # nothing left to do but some workers are down for good
    gateway_up: bool
    gateway_routes: bool       # nginx was confirmed to serve a frontend (gateway.json's upstreams)
    all_ready: bool
    zero: bool                 # scaled to zero on purpose (reconcile.autoscale)
    fe_down: bool
    canary: str | None         # why the canary says the frontend does not answer
    moving: list[str]          # what the change still moves once everything wanted is Ready


def _facts(name: str, d: DesiredRecipe | None, o: Observed, rp: RecipePlan, rows: list[dict],
           gateway: dict | None) -> _Facts:
    workers = [r for r in rows if r["role"] in ROLES]
    services = [r for r in rows if is_service_role(r["role"])]
    critical = {u.role for u in d.services if u.critical} if d else set()
    services_up = all(r["ready"] for r in services if r["role"] in critical)
    ready, want = sum(r["ready"] for r in workers), len(workers)
    fe_rows = [r for r in rows if r["role"] == FRONTEND]
    # the recipe serves while one of its frontends does: the first Ready one stands for them all
    fe = next((r for r in fe_rows if r["ready"]), fe_rows[0] if fe_rows else None)
    failed = [r["name"] for r in workers if r["phase"] == "Failed"]
    # suspended keeps what runs: it can be serving, and Ready says so
    gateway_up = gateway is None or fe is None or gateway["up"]
    # the gateway routes only once run has reloaded it with a frontend (what nginx was confirmed
    # to serve, gateway.json): before that a request through the endpoint is answered 503
    gateway_routes = gateway is None or fe is None or not gateway["up"] or bool(gateway.get("upstreams"))
    # what the recipe still moves: a successor allocation queued or beside its predecessor, old lives
    # beside their successors, scale-down victims draining, units waiting on a step of the change
    moving = sorted({w.reason.name for w in rp.waiting.values() if w.reason in MOVING}
                    | ({"HandOver"} if _succession(o, name) else set())
                    | ({"OldLivesServing"} if d is not None and d.previous else set())
                    | ({"Draining"} if d is not None and d.draining else set()))
    return _Facts(
        workers=workers, services=services, fe_rows=fe_rows, fe=fe, ready=ready, want=want,
        updated=sum(r["upToDate"] for r in workers), services_up=services_up,
        pending=sorted((o.pending[a.job_id] for a in o.allocs_of(name) if a.job_id in o.pending), key=lambda p: p.index),
        # rollout analysis refused the new spec: the old lives serve on, nothing moves until the recipe changes
        refused=sorted(f"{u}: {w.detail}" for u, w in rp.waiting.items() if w.reason is WaitReason.ROLLOUT_FAILED),
        pending_actions=rp.actions or rp.deferred, suspended=bool(d and d.suspended), failed=failed,
        stalled=bool(failed) and all(r["ready"] or r["phase"] == "Failed" for r in workers),
        gateway_up=gateway_up, gateway_routes=gateway_routes,
        all_ready=d is not None and want > 0 and ready == want and not d.waiting and (
            fe is None or fe["ready"]) and services_up and gateway_up and gateway_routes,
        zero=d is not None and want == 0 and not fe_rows and not d.waiting and not d.units,
        fe_down=bool(fe_rows) and not fe["ready"],  # type: ignore[index]
        canary=next((r["notReadyReason"] for r in fe_rows if r.get("notReadyReason")), None),
        moving=moving)


def _ready(f: _Facts, gateway: dict | None) -> tuple[bool, str, str]:
    reason = ("AllReady" if f.all_ready else "ScaledToZero" if f.zero else "GatewayDown" if not f.gateway_up
              else "FrontendNotAnswering" if f.fe_down and f.canary
              else "GatewayNotRouting" if not f.gateway_routes and not f.fe_down and f.ready == f.want else "NotReady")
    fe, fe_rows, services = f.fe, f.fe_rows, f.services
    return (f.all_ready, reason,
            f"{f.ready}/{f.want} workers ready" + ((f", frontend {'ready' if fe['ready'] else 'not ready'}" if len(fe_rows) == 1 else
               f", frontends {sum(r['ready'] for r in fe_rows)}/{len(fe_rows)} ready") if fe else "")
            + (f", services {sum(r['ready'] for r in services)}/{len(services)} ready" if services else "")
            + (f", gateway down: {gateway['reason']}" if not f.gateway_up else "")  # type: ignore[index]
            + (", the gateway routes to no frontend yet" if f.gateway_up and not f.gateway_routes else "")
            + (f" ({f.canary})" if f.fe_down and f.canary else ""))


def _progressing(f: _Facts, d: DesiredRecipe | None, now: float) -> tuple[bool, str, str]:
    """The first of these that holds, in this order: no spec, suspended, scaled to zero, waiting
    for an allocation, refused by analysis, acting, stalled, waiting for Ready, finishing, converged."""
    progress = (f" ({f.updated}/{f.want} workers updated, {sum(r['available'] for r in f.workers)} available)"
                if f.want else "")
    if d is None:
        return False, "NoSpec", "no desired state: see Invalid, or the recipe's error"
    if f.suspended:
        return False, "Suspended", ("suspended (reconcile.suspend or `reconciler suspend`): no actions "
                                    "are taken; what runs keeps running")
    if f.zero:
        return False, "ScaledToZero", ("scaled to zero (reconcile.autoscale): no worker and no "
                                       "allocation; the gateway holds requests and one brings a worker back")
    if d.waiting and f.pending:
        return True, "AllocationPending", "; ".join(p.explain(now) for p in f.pending) + progress
    if d.waiting and d.pending_reason:
        return True, "AllocationPending", d.pending_reason
    if d.waiting:
        return True, "AllocationPending", f"{len(d.waiting)} worker(s) wait for their allocation"
    if f.refused:
        return False, "RolloutFailed", ("rollout analysis failed, the old lives keep serving and the "
                                        "spec is not tried again until the recipe changes: " + "; ".join(f.refused))
    acts = f.pending_actions
    if acts:
        return True, "Reconciling", ("; ".join(a.describe() for a in acts[:3])
                                     + (f" (+{len(acts) - 3} more)" if len(acts) > 3 else "") + progress)
    if not f.all_ready and f.stalled:
        return False, "WorkersFailed", f"{', '.join(f.failed)} will not be restarted (restart policy)"
    if not f.all_ready:
        return True, "WaitingForReady", f"{f.ready}/{f.want} workers ready" + progress
    if f.moving:  # everything wanted is Ready, and the change is still being finished (old lives leaving)
        return True, "Reconciling", ("finishing: " + ", ".join(f.moving)
                                     + ("; " + "; ".join(p.explain(now) for p in f.pending) if f.pending else "") + progress)
    return False, "Converged", "every worker runs the current spec and is ready"


def _degraded(f: _Facts, launches: dict[str, dict]) -> tuple[bool, str, str]:
    """A worker or service down after it was launched at least once (not one still to start)."""
    down = [r["name"] for r in f.services + f.workers if r["phase"] in ("Pending", "BackOff", "Failed")
            and launches.get(r["name"], {}).get("launches", 0) > 0]
    return (bool(down), "WorkersFailed" if f.failed else ("WorkersDown" if down else "AsExpected"),
            (f"not restarted: {', '.join(f.failed)}; " if f.failed else "")
            + (f"down: {', '.join(down)}" if down else "no worker is down"))


def serves(d: DesiredRecipe, o: Observed, u, ok: bool) -> bool:
    """Whether the unit's capacity takes requests now, from either of its lives and whatever its
    spec: the current life by the routers' rule (Ready, or Ready before and failing below the
    liveness threshold), else the old life a surge or a hand-over keeps beside it. A scale-down
    victim draining is out of the routers: it serves nobody new; nor does a warm spare, yet."""
    if u.name in d.draining or u.name in d.spares:
        return False
    if serve_rules.serving(d, ok, o.health.get(u.key)):
        return True
    return (u.role, u.index) in d.previous and serve_rules.old_life_serving(
        d, bool(o.previous_ready.get(u.key)), o.previous_failures.get(u.key, 0))


def availability(d: DesiredRecipe | None, workers: list[dict], fe_rows: list[dict], zero: bool,
                 routed: bool) -> tuple[bool, str, str]:
    """Kubernetes' Deployment ``Available``: enough capacity serves, whatever is being rolled out.
    Every engine role has ``reconcile.min_available`` workers that serve (1 by default; all of them
    when it has fewer), a frontend answers (when the recipe has one) and the
    gateway routes to it (when there is one). A planned change keeps it True: its old lives serve
    until their successors do."""
    if d is None:
        return False, "NoSpec", "no desired state: see Invalid, or the recipe's error"
    if zero:
        return True, "ScaledToZero", "scaled to zero: the gateway holds a request and brings a worker back"
    per_role: dict[str, list[int]] = {}
    for r in workers:
        c = per_role.setdefault(r["role"], [0, 0])
        c[0] += int(r["available"])
        c[1] += 1
    # the recipe's minimum (reconcile.min_available, 1 by default), capped at what the role has
    short = [f"{role} {n}/{total}" for role, (n, total) in per_role.items() if n < min(d.min_available, total)]
    text = ", ".join(f"{role} {n}/{total}" for role, (n, total) in per_role.items())
    fe_ok = not fe_rows or any(r["available"] for r in fe_rows)
    if not per_role:
        return False, "NoWorkers", "no engine worker is placed yet"
    if short or not fe_ok or not routed:
        why = ([f"fewer than {d.min_available} serving: {', '.join(short)}" if d.min_available > 1
                 else f"no worker serves: {', '.join(short)}"] if short else []) + (["no frontend answers"] if not fe_ok else
               ["the gateway routes nowhere yet"] if not routed else [])
        return False, "MinimumWorkersUnavailable", "; ".join(why) + f" (serving: {text})"
    return True, "MinimumWorkersAvailable", f"serving: {text}" + (", a frontend answers" if fe_rows else "")


def _succession(o: Observed, name: str) -> bool:
    """An allocation queued, or two at one index (a successor beside the job it replaces): a hand-over."""
    allocs = o.allocs_of(name)
    return any(a.state != "RUNNING" for a in allocs) or len({a.index for a in allocs}) < len(allocs)


def _restarts(launches: dict[str, dict], unit: str) -> int:
    """Relaunches after failures: what RESTARTS shows (rollout replacements are not restarts)."""
    return launches.get(unit, {}).get("restarts", 0)


def _exit(rec: tuple[int, float] | None) -> dict | None:
    """The launcher's record of the last life that ended: exit code (128+n = signal n) and when."""
    return {"code": rec[0], "at": iso(rec[1])} if rec else None


def role_counts(rp: RecipePlan, rows: list[dict]) -> dict[str, dict[str, int]]:
    """Per role, the plan's counts (desired, running, ready, unavailable)."""
    out = {role: {"desired": c.desired, "ready": c.ready, "running": c.running, "unavailable": c.unavailable}
           for role, c in rp.counts.items()}
    for r in rows:  # a plan that did not converge the recipe (held, suspended) has no counts
        c = out.setdefault(r["role"], {"desired": 0, "ready": 0, "running": 0, "unavailable": 0})
        if r["role"] not in rp.counts:
            c["desired"] += 1
            c["ready"] += int(r["ready"])
            c["running"] += int(bool(r["steps"]))
            c["unavailable"] += int(not r["ready"])
    return out


MISSING_PHASE = {WaitReason.BACKOFF: "BackOff", WaitReason.GAVE_UP: "Failed"}


def worker_rows(
    name: str, d: DesiredRecipe, o: Observed, rp: RecipePlan, launches: dict[str, dict],
    exits: dict[str, tuple[int, float]],
) -> list[dict]:
    steps: dict[tuple[str, int], list] = {}
    for s in o.steps_of(name):
        steps.setdefault((s.role, s.index), []).append(s)
    rows = []
    # a unit this plan relaunches for its service's new life lost its registrations with the old
    # one: not Ready from this tick on, though its probe still passed a moment ago
    leaving = {c.unit for c in rp.stop if c.reason is StopReason.DEPENDENCY_RESTARTED}
    # launched by this very pass for the first time (a scale-up, a new worker): the snapshot this
    # status is built from predates it, so it has no step yet; not down (a relaunch after a
    # failure is: its restart counts it)
    starting = {a.unit.name for a in rp.place if not a.restart}
    for u in d.all_units:
        if u.run_once:  # reported apart (state/<recipe>/benchmarks/): not part of Ready or Degraded
            continue
        ss = steps.get((u.role, u.index), [])
        ok = bool(o.ready.get(u.key)) and u.name not in leaving
        if not ss:
            wait = rp.waiting.get(u.name)
            phase = MISSING_PHASE.get(wait.reason, "Pending") if wait else \
                "Starting" if u.name in starting else "Pending"
        elif any(s.spec_hash != u.spec_hash for s in ss):
            phase = "Outdated"
        else:
            phase = "Ready" if ok else "Starting"
        rows.append({
            "name": u.name, "role": u.role, "index": u.index, "phase": phase, "ready": ok and phase == "Ready",
            "upToDate": any(s.spec_hash == u.spec_hash for s in ss), "available": serves(d, o, u, ok),
            "nodes": list(u.nodes), "gpus": list(u.gpus), "ports": dict(u.ports), "url": u.url,
            "steps": sorted(s.step_id for s in ss), "specHash": u.spec_hash,
            "restarts": _restarts(launches, u.name),
            "lastExit": _exit(_last_exit(exits, u.name)),
            **({"notReadyReason": o.why[u.key]} if not ok and u.key in o.why else {}),
        })
    def waiting(role: str, index: int, why: str | None = None) -> dict:
        name = f"{role}_{index}"
        return {"name": name, "role": role, "index": index, "phase": "Waiting", "ready": False,
                "upToDate": False, "available": False, "nodes": [],
                "gpus": [], "ports": {}, "url": None, "steps": [], "specHash": None,
                "restarts": _restarts(launches, name), "lastExit": _exit(_last_exit(exits, name)),
                **({"notReadyReason": why} if why else {})}

    rows += [waiting(role, index) for role, index in d.waiting]
    for unit, why in d.unplaceable.items():  # wanted, but no allocation holds it yet: not Ready, and why
        role, _, index = unit.rpartition("_")
        if role != "dedicated":
            rows.append(waiting(role, int(index) if index.isdigit() else 0, why))
    rows.sort(key=lambda r: unit_order((r["role"], r["index"])))
    return rows


def _last_exit(exits: dict[str, tuple[int, float]], name: str) -> tuple[int, float] | None:
    """The newest exit record of the unit's two life slots (``world.life_name``)."""
    recs = [r for r in (exits.get(name), exits.get(life_name(name, 1))) if r]
    return max(recs, key=lambda r: r[1], default=None)
