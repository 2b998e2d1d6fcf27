"""Each pass, after the plan is executed and before ``record`` writes the port registry (a first
gateway takes a port): which deployments have a gateway, with which upstreams and hold timeout;
the running ones probed end to end; the ones no longer wanted stopped."""

from __future__ import annotations

from pathlib import Path

import structlog

from reconciler.core.plan.rename import (holds_old, new_gateway_shares, new_gateway_takes_over, new_gateway_waits,
                                         old_gateway_stops)
from reconciler.drivers.state import StateDir
from reconciler.shell.readiness import router_sync
from reconciler.shell.gateway import holder_supervisor, wake_eta
from reconciler.shell.gateway.answering import GatewayProbe
from reconciler.shell.gateway.host import Gateways
from reconciler.shell.gateway.job_slurm import placement
from reconciler.shell.gateway.record import prefix_of
from reconciler.shell.snapshot import Snapshot
from reconciler.world import FRONTEND, DesiredRecipe, Observed

log = structlog.get_logger("reconciler")


def gateway_upstreams(d: DesiredRecipe, o: Observed) -> tuple[list[str], bool]:
    """host:port of the frontends that serve (Ready — their canary answers —, or Ready before and
    not yet judged dead: one failed probe does not flap the gateway; nginx's passive checks cover
    the moment); and whether they are *unproven*: none is alive, so they are the addresses the
    frontends are relaunched at (a life keeps its port), and the first to listen again is routed
    to at once — not a probe interval, a canary and a reload later (the only frontend's gap)."""
    ready = [u for u in d.frontends if u.health_port and router_sync.serving(d, o, u)]
    # a frontend's old life (a surge, or a hand-over to another allocation) serves until it leaves:
    # without it, the gateway has no upstream between the old life's last tick and the new one's Ready
    # (one slow answer of it does not drop it: router_sync.old_serving, as for a worker's old life)
    ready += [u for key, u in sorted(d.previous.items()) if key[0] == FRONTEND and u.health_port
              and router_sync.old_serving(d, o, u)]
    # none answers its canary (the workers or their registry are down): the ones still alive stay,
    # so that the gateway passes on what it can rather than answer 503 to everything
    alive = ready or [u for u in d.frontends if u.health_port and (h := o.health.get(u.key)) is not None
                      and h.was_ready and h.missing_since is None and h.probe_failures < d.liveness_failures]
    if alive:
        return sorted({f"{u.nodes[0]}:{u.health_port}" for u in alive}), False
    placed = [u for u in d.frontends if u.health_port and u.nodes]
    return sorted({f"{u.nodes[0]}:{u.health_port}" for u in placed}), bool(placed)


def hold_timeout(snap: Snapshot, name: str, root: Path | None = None) -> float | None:
    """How long the gateway's holder keeps a request no frontend takes: a recipe that scales to zero
    holds for its autoscale.hold_timeout_seconds, any other for reconcile.gateway.hold_seconds (0:
    no holder, a JSON 503 at once). ``root``: the state directory (its measured startups)."""
    r = snap.manifests.recipes.get(name)
    if r is None:
        return None
    cfg = r.reconcile.autoscale
    if cfg is not None and cfg.scale_to_zero_after_seconds is not None:
        # at least the measured startup: a request held for less than a wake-up takes is only refused
        measured = wake_eta.measured_startup(root, name) if root is not None else None
        return wake_eta.hold_at_least(cfg.hold_timeout_seconds, measured)
    return r.reconcile.gateway.hold_seconds or None


def front_door(g) -> dict:
    """``reconcile.gateway``'s API keys file, caps on what the holder keeps, and TLS files."""
    return holder_supervisor.front_door(g.api_keys, g.max_held_requests, g.max_held_mb,
                                        (g.tls.cert, g.tls.key) if g.tls is not None else None)


def sync_gateways(state: StateDir, gateways: Gateways, snap: Snapshot, answering: GatewayProbe) -> None:
    """Each deployment with a frontend has a gateway; a deployment without one (deleted, or its
    frontend removed) has its gateway stopped. A gateway whose frontend is only gone for now (its
    allocation requeued, preempted, lost) keeps running and keeps its address: it answers 503
    until a frontend is back. One recipe's gateway failing touches no other."""
    d = snap.desired
    known = set(gateways.known())
    wanted = {n for n, dr in d.recipes.items() if dr.frontend is not None or (
        n in known and (r := snap.manifests.recipes.get(n)) is not None and r.frontend.type != "none")}
    # a rename (core/plan/rename.py): the new name's gateway waits to take the old one's address,
    # which it then binds beside the old master (reuseport) before that one is stopped
    renames = snap.manifests.renames
    wanted -= {n for n, r in renames.items() if new_gateway_waits(r)}
    # ... and once the new one serves there, the old one's gateway stops before its deployment goes
    retiring = {r.old for r in renames.values() if old_gateway_stops(r)}
    wanted -= retiring
    take = {n: r.old for n, r in renames.items() if new_gateway_takes_over(r)}
    # two masters on one port only while a rename needs them: once over, SO_REUSEPORT is dropped
    # from the record and the config (takeover.shared)
    share = {r.old for r in renames.values() if holds_old(r)} | {n for n, r in renames.items() if new_gateway_shares(r)}
    for name in sorted(wanted):
        dr = d.recipes[name]
        try:
            holder_supervisor.say_nothing_comes(prefix_of(state.root, name), holder_supervisor.SUSPENDED if dr.suspended else None)
            if dr.suspended:
                changes = []
            else:
                upstreams, unproven = gateway_upstreams(dr, snap.observed)
                r = snap.manifests.recipes.get(name)
                changes = gateways.sync(name, upstreams, snap.ports, snap.now, unproven=unproven,
                                        hold=hold_timeout(snap, name, state.root),
                                        listen=r.reconcile.gateway.listen if r is not None else None,
                                        place=placement(r) if r is not None else None,
                                        door=front_door(r.reconcile.gateway) if r is not None else None,
                                        take_from=take.get(name), share=name in share)
        except Exception as e:  # noqa: BLE001 - one gateway's failure must not stop the tick
            log.exception("gateway sync failed", recipe=name, error=f"{type(e).__name__}: {e}")
            continue
        for c in changes:
            state.event(c.kind, c.recipe, c.message)
    try:
        for c in answering.probe(state, sorted(wanted), snap.now):
            state.event(c.kind, c.recipe, c.message)
    except OSError as e:  # its record not written (a full disk): the next pass probes again
        log.error("gateway probe not recorded", error=str(e))
    keep = (wanted | set(d.held) | set(snap.manifests.invalid)) - retiring
    for name in gateways.known():
        # the prune guard keeps what it holds, but not one whose teardown `reconciler prune` confirmed
        if name not in keep and (not snap.plan.refused_prune or name in d.prune_confirmed):
            try:
                changes = gateways.stop(name, snap.ports)
            except Exception as e:  # noqa: BLE001 - one gateway's failure must not stop the tick
                log.exception("gateway stop failed", recipe=name, error=f"{type(e).__name__}: {e}")
                continue
            for c in changes:
                state.event(c.kind, c.recipe, c.message)
