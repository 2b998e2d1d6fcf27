"""The shared services' unit source: one unit per instance of every service that is neither
external nor per worker (etcd, NATS, the Mooncake master, generic ones), on the head node, the
dedicated one, or one per node of a worker-node placement. An instance whose node is not
running yet waits; without the head node, all of them do. Each phase's services gate the later
phases (``plan/placement.py``). etcd and NATS have two life slots: moved to a successor
allocation (a hand-over), the new life starts beside the old one, in the slot the context
gave their clients' address (``context.service_slots``)."""

from __future__ import annotations

from reconciler.desired.context import Context
from reconciler.desired.services.layout import instance_ordinals
from reconciler.desired.services.units import MOVING_KINDS, instances, service_unit
from reconciler.desired.sources.base import FAST_RESTART, Life, Offer
from reconciler.world import Unit


def offer(ctx: Context, earlier: tuple[Unit, ...]) -> Offer:
    recipe, where = ctx.recipe, ctx.where
    specs = list(ctx.top.services)
    every = [(s.role, i) for s in specs if not s.external and not s.per_worker
             for i, _ in instance_ordinals(ctx.top.layout, s)]
    gates: dict[str, tuple[str, ...]] = {}
    for s in specs:
        if not s.external and not s.per_worker:  # a per-worker instance gates its own worker (Unit.needs)
            gates[s.phase] = (*gates.get(s.phase, ()), s.role)
    restart = {s.role: FAST_RESTART for s in specs}
    head = where.head
    if head is None:
        return Offer(waiting=tuple(every), restart=restart, gates=gates)
    lives, job_of = [], {}
    for s, i, o, node, infra in instances(ctx.top.layout, specs, head, where.hosts):
        def build(slot: int, s=s, i=i, o=o, node=node, infra=infra) -> Unit:
            return service_unit(recipe, s, head, ctx.ports, ctx.state_dir, ctx.discovery_env, ctx.container, i, o,
                                node, infra, slot)

        # etcd/NATS move with their clients: a new life on the successor beside the old one
        moves = s.role in ctx.service_slots and i == 0
        lives.append(Life((s.role, i), build, slotted=moves, moves=moves))
        job_of[(s.role, i)] = where.jobs.get(o, where.head_job or "")
    built = set(job_of)
    waiting = tuple(k for k in every if k not in built)  # their node is not running yet
    return Offer(tuple(lives), waiting, job_of, restart, gates)
