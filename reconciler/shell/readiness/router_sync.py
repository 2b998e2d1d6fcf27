"""Keep a router's worker set in step with readiness, through its worker-management API.

Level-triggered like everything else: each tick reads the router's list (``GET /workers``)
and adds the Ready workers it lacks and removes the ones that are no longer Ready or
desired. A router that does not answer is left for the next tick. The SGLang router
(sglang-router / SGLang Model Gateway), whose ``POST /workers`` takes ``{url, worker_type,
bootstrap_port}`` and ``DELETE /workers/<id>`` removes one; the vLLM router (vllm-router
0.1.17), the same API with the URL itself (escaped) as the id.
"""

from __future__ import annotations

import http.client
import json
import time
from urllib.parse import quote
from dataclasses import dataclass

import structlog

from reconciler.core.plan import analysis, stop
from reconciler.core.plan.rollout import old_life_routed
from reconciler.world import DesiredRecipe, Observed

log = structlog.get_logger()
TIMEOUT = 2.0
WORKER_APIS = ("sglang-router", "vllm-router")


@dataclass(frozen=True)
class Change:
    verb: str  # add | remove
    url: str


def serving(d: DesiredRecipe, o: Observed, u) -> bool:
    """Ready, or Ready before and not (yet) judged dead: one failed probe does not flap the router.
    A worker the autoscaler drains, or keeps as a warm spare, is out of the routers, whatever its health."""
    return (u.name not in d.draining and u.name not in d.spares and stop.serving(d, bool(o.ready.get(u.key)), o.health.get(u.key))
            and not analysis.held(d, o, u))  # a surge life under rollout analysis takes no request yet


def old_serving(d: DesiredRecipe, o: Observed, u) -> bool:
    """An old life (a surge's, a hand-over's) by its own probes: Ready, or Ready before and failing
    below the liveness threshold since (``stop.old_life_serving``)."""
    return stop.old_life_serving(d, bool(o.previous_ready.get(u.key)), o.previous_failures.get(u.key, 0))


def old_lives(d: DesiredRecipe, o: Observed, at: float, strict: bool = False) -> list:
    """Old lives of surging workers that still take requests: serving (Ready, or failing below the
    liveness threshold since it was: ``stop.old_life_serving``), and their successor not yet
    Ready for long enough (``core/plan/rollout.old_life_routed``). ``strict``: for a router that
    is given only the workers Ready right now (the built-in one), an old life also stands in
    while its successor's probe fails."""
    workers = {(u.role, u.index): u for u in d.units}  # not a moving service's or frontend's old life
    return [u for key, u in sorted(d.previous.items()) if key in workers and not u.shares_port
            and old_serving(d, o, u)
            and (old_life_routed(d, bool(o.ready.get(u.key)), o.health.get(u.key), at, _start(d, o, workers[key]))
                 or (strict and not o.ready.get(u.key)))]


def _start(d: DesiredRecipe, o: Observed, new) -> float | None:
    """When the new life's hand-over clock started (its first Ready; with rollout analysis, its pass)."""
    old = analysis.old_spec_of(o.steps_of(d.name), new) if d.analysis is not None else None
    return analysis.handover_start(d, o, new, old, o.health.get(new.key))


def wanted(d: DesiredRecipe, o: Observed, at: float | None = None) -> dict[str, dict]:
    """url -> the body that registers it, for every serving worker (and old life still routed)."""
    out = {}
    old = old_lives(d, o, time.time() if at is None else at)
    for u in [*d.units, *old]:
        if not u.url or (u not in old and not serving(d, o, u)):
            continue
        body: dict = {"url": u.url}
        if d.served_model:
            # the router asks a worker its model through SGLang's /get_model_info, which vLLM does not
            # serve: it then lists the worker's model as "unknown" and the canary's never answers
            body["model_id"] = d.served_model
        if u.role in ("prefill", "decode"):  # a disaggregated recipe: the router runs --pd-disaggregation
            body["worker_type"] = u.role
            if u.role == "prefill" and u.ports.get("bootstrap"):
                body["bootstrap_port"] = u.ports["bootstrap"]
        out[u.url] = body
    return out


def diff(want: dict[str, dict], have: dict[str, str]) -> tuple[list[dict], list[tuple[str, str]]]:
    """(bodies to add, (id, url) to remove); ``have`` is url -> worker id."""
    add = [body for url, body in sorted(want.items()) if url not in have]
    remove = [(wid, url) for url, wid in sorted(have.items()) if url not in want]
    return add, remove


PENDING_TTL = 10.0


class RouterSync:
    """The routers' worker sets, kept by one controller: it remembers what it POSTed lately."""

    def __init__(self) -> None:
        # "<router host:port> <url>" -> when it was POSTed: the router queues an addition, a re-POST
        # before it shows is noise (per router: each of a recipe's routers is given every worker)
        self.pending: dict[str, float] = {}

    def sync(self, d: DesiredRecipe, o: Observed, now: float | None = None, at: float | None = None) -> list[Change]:
        """Every router of the recipe (frontend.num_additional_frontends) gets the same worker set.
        ``now``: a monotonic clock (re-POST spacing); ``at``: the tick's time (surge hand-over)."""
        return [c for fe in d.frontends for c in _sync_one(d, fe, o, now, at, self.pending)]


def _sync_one(d: DesiredRecipe, fe, o: Observed, now: float | None, at: float | None,
              pending: dict[str, float]) -> list[Change]:
    # a router that answers its health probe but not yet its canary (it has no worker to list the
    # model from: the canary needs what this very sync gives it) is given its workers too
    if fe.worker_api not in WORKER_APIS or not (o.ready.get(fe.key) or fe.key in o.why):
        return []
    host, port = fe.nodes[0], fe.health_port
    try:
        status, raw = _call(host, port, "GET", "/workers")
        have = {w["url"]: w.get("id") or quote(w["url"], safe="")
                for w in json.loads(raw).get("workers", [])} if status == 200 else None
    except (OSError, ValueError, http.client.HTTPException, KeyError, TypeError) as e:
        log.warning("cannot read the router's workers", recipe=d.name, error=str(e))
        return []
    if have is None:
        return []
    for url in have:
        pending.pop(f"{host}:{port} {url}", None)
    add, remove = diff(wanted(d, o, at), have)
    now = time.monotonic() if now is None else now
    done = []
    for body in add:
        if now - pending.get(f"{host}:{port} {body['url']}", -PENDING_TTL) < PENDING_TTL:
            continue
        if _try(host, port, "POST", "/workers", body, d.name):
            pending[f"{host}:{port} {body['url']}"] = now
            done.append(Change("add", body["url"]))
    for wid, url in remove:
        if _try(host, port, "DELETE", f"/workers/{wid}", None, d.name):
            done.append(Change("remove", url))
    return done


def _try(host: str, port: int, method: str, path: str, body: dict | None, recipe: str) -> bool:
    try:
        status, raw = _call(host, port, method, path, body)
    except (OSError, http.client.HTTPException) as e:
        log.warning("router worker update failed", recipe=recipe, call=f"{method} {path}", error=str(e))
        return False
    if status >= 300:
        log.warning("router refused a worker update", recipe=recipe, call=f"{method} {path}", status=status,
                    body=raw[:200].decode(errors="replace"))
        return False
    return True


def _call(host: str, port: int, method: str, path: str, body: dict | None = None) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection(host, port, timeout=TIMEOUT)
    try:
        data = json.dumps(body).encode() if body is not None else None
        conn.request(method, path, body=data, headers={"Content-Type": "application/json"} if data else {})
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()
