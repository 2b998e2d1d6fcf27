"""A recipe's status: conditions and one row per worker. Pure."""

from __future__ import annotations

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
    is the endpoint, and the recipe is Ready only while it runs.

    Long on purpose (~120 lines): the conditions read each other's facts (ready and wanted counts,
    the frontend, the gateway, what moves), in the order Kubernetes gives them; cut into functions
    they would pass a dozen of those values to each other. ``availability`` is apart: it reads none."""
    rp = rp or RecipePlan(name)
    rows = worker_rows(name, d, o, rp, launches, exits or {}) if d else []
    workers = [r for r in rows if r["role"] in ROLES]
    services = [r for r in rows if is_service_role(r["role"])]
    critical = {u.role for u in d.services if u.critical} if d else set()
    services_up = all(r["ready"] for r in services if r["role"] in critical)  # the rest: Degraded only
    ready = sum(r["ready"] for r in workers)
    want = len(workers)
    fe_rows = [r for r in rows if r["role"] == FRONTEND]
    # the recipe serves while one of its frontends does: the first Ready one stands for them all
    fe = next((r for r in fe_rows if r["ready"]), fe_rows[0] if fe_rows else None)
    pending_actions = rp.actions or rp.deferred
    suspended = bool(d and d.suspended)
    # Slurm's reason in words and its expected start, per pending allocation (core/plan/pending.py)
    pending = sorted((o.pending[a.job_id] for a in o.allocs_of(name) if a.job_id in o.pending), key=lambda p: p.index)
    # rollout analysis refused the new spec: the old lives serve on, nothing moves until the recipe changes
    refused = sorted(f"{u}: {w.detail}" for u, w in rp.waiting.items() if w.reason is WaitReason.ROLLOUT_FAILED)
    conds = []

    def cond(kind: str, status: bool, reason: str, message: str) -> None:
        old = next((c for c in prev.get("conditions", []) if c["type"] == kind), None)
        value = "True" if status else "False"
        since = old["lastTransitionTime"] if old and old["status"] == value else iso(now)
        conds.append({"type": kind, "status": value, "reason": reason, "message": message,
                      "lastTransitionTime": since, "observedGeneration": d.generation if d else None})

    failed = [r["name"] for r in workers if r["phase"] == "Failed"]
    # nothing left to do but some workers are down for good: stalled, not progressing
    stalled = bool(failed) and all(r["ready"] or r["phase"] == "Failed" for r in workers)
    # suspended keeps what runs: it can be serving, and Ready says so
    gateway_up = gateway is None or fe is None or gateway["up"]
    # the gateway routes only once run has reloaded it with a frontend (what nginx was confirmed
    # to serve, gateway.json): before that a request through the endpoint is answered 503
    gateway_routes = gateway is None or fe is None or not gateway["up"] or bool(gateway.get("upstreams"))
    all_ready = d is not None and want > 0 and ready == want and not d.waiting and (
        fe is None or fe["ready"]) and services_up and gateway_up and gateway_routes
    # scaled to zero (reconcile.autoscale): nothing runs on purpose; the gateway holds requests
    zero = d is not None and want == 0 and not fe_rows and not d.waiting and not d.units
    fe_down = bool(fe_rows) and not fe["ready"]  # type: ignore[index]
    canary = next((r["notReadyReason"] for r in fe_rows if r.get("notReadyReason")), None)
    reason = ("AllReady" if all_ready else "ScaledToZero" if zero else "GatewayDown" if not gateway_up
              else "FrontendNotAnswering" if fe_down and canary
              else "GatewayNotRouting" if not gateway_routes and not fe_down and ready == want else "NotReady")
    cond("Ready", all_ready, reason,
         f"{ready}/{want} workers ready" + ((f", frontend {'ready' if fe['ready'] else 'not ready'}" if len(fe_rows) == 1 else
            f", frontends {sum(r['ready'] for r in fe_rows)}/{len(fe_rows)} ready") if fe else "")
         + (f", services {sum(r['ready'] for r in services)}/{len(services)} ready" if services else "")
         + (f", gateway down: {gateway['reason']}" if not gateway_up else "")
         + (", the gateway routes to no frontend yet" if gateway_up and not gateway_routes else "")
         + (f" ({canary})" if fe_down and canary else ""))
    cond("Available", *availability(d, workers, fe_rows, zero, gateway_up and gateway_routes))
    # what the recipe still moves: a successor allocation queued or beside its predecessor, old lives
    # beside their successors, scale-down victims draining, units waiting on a step of the change
    moving = sorted({w.reason.name for w in rp.waiting.values() if w.reason in MOVING}
                    | ({"HandOver"} if _succession(o, name) else set())
                    | ({"OldLivesServing"} if d is not None and d.previous else set())
                    | ({"Draining"} if d is not None and d.draining else set()))
    updated = sum(r["upToDate"] for r in workers)
    progress = f" ({updated}/{want} workers updated, {sum(r['available'] for r in workers)} available)" if want else ""
    if d is None:
        cond("Progressing", False, "NoSpec", "no desired state: see Invalid, or the recipe's error")
    elif suspended:
        cond("Progressing", False, "Suspended", "suspended (reconcile.suspend or `reconciler suspend`): no actions "
             "are taken; what runs keeps running")
    elif zero:
        cond("Progressing", False, "ScaledToZero", "scaled to zero (reconcile.autoscale): no worker and no "
             "allocation; the gateway holds requests and one brings a worker back")
    elif d.waiting and pending:
        cond("Progressing", True, "AllocationPending", "; ".join(p.explain(now) for p in pending) + progress)
    elif d.waiting and d.pending_reason:
        cond("Progressing", True, "AllocationPending", d.pending_reason)
    elif d.waiting:
        cond("Progressing", True, "AllocationPending", f"{len(d.waiting)} worker(s) wait for their allocation")
    elif refused:
        cond("Progressing", False, "RolloutFailed", "rollout analysis failed, the old lives keep serving and the "
             "spec is not tried again until the recipe changes: " + "; ".join(refused))
    elif pending_actions:
        cond("Progressing", True, "Reconciling", "; ".join(a.describe() for a in pending_actions[:3])
             + (f" (+{len(pending_actions) - 3} more)" if len(pending_actions) > 3 else "") + progress)
    elif not all_ready and stalled:
        cond("Progressing", False, "WorkersFailed", f"{', '.join(failed)} will not be restarted (restart policy)")
    elif not all_ready:
        cond("Progressing", True, "WaitingForReady", f"{ready}/{want} workers ready" + progress)
    elif moving:  # everything wanted is Ready, and the change is still being finished (old lives leaving)
        cond("Progressing", True, "Reconciling", "finishing: " + ", ".join(moving)
             + ("; " + "; ".join(p.explain(now) for p in pending) if pending else "") + progress)
    else:
        cond("Progressing", False, "Converged", "every worker runs the current spec and is ready")
    down = [r["name"] for r in services + workers if r["phase"] in ("Pending", "BackOff", "Failed")
            and launches.get(r["name"], {}).get("launches", 0) > 0]
    cond("Degraded", bool(down), "WorkersFailed" if failed else ("WorkersDown" if down else "AsExpected"),
         (f"not restarted: {', '.join(failed)}; " if failed else "")
         + (f"down: {', '.join(down)}" if down else "no worker is down"))
    cond("Invalid", invalid is not None, "InvalidSpec" if invalid else "Valid",
         (invalid + ("; still running the last applied spec" if d else "")) if invalid else "the recipe file validates")
    phase = ("Invalid" if invalid and d is None else "Suspended" if suspended else "Ready" if all_ready
             else "ScaledToZero" if zero
             else "Degraded" if (stalled and not pending_actions) or refused else "Progressing")
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
        "replicas": {"desired": want, "ready": ready, "upToDate": updated,
                     "available": sum(r["available"] for r in workers)},
        "endpoint": gateway["url"] if gateway and (fe or zero) else (fe["url"] if fe else None),
        # what clients send as "model": kept from the last spec while the file is invalid or missing
        "servedModel": d.served_model if d else prev.get("servedModel"),
        "workers": rows,
        "pendingAllocations": [p.doc(now) for p in pending],
    }


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
