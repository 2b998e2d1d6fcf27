"""The per-worker services' unit source (``placement.per: worker``): one instance beside each
placed worker, on that worker's allocation and nodes, in its device view (``services/per_worker.py``);
a waiting worker's instances wait with it."""

from __future__ import annotations

from reconciler.desired.context import Context
from reconciler.desired.services import per_worker
from reconciler.desired.sources.base import FAST_RESTART, Life, Offer
from reconciler.labels import split_engine
from reconciler.world import Unit


def offer(ctx: Context, earlier: tuple[Unit, ...]) -> Offer:
    recipe, where = ctx.recipe, ctx.where
    specs = list(ctx.top.services)
    if not any(s.per_worker for s in specs):
        return Offer()  # no instance, nothing waits, no restart policy: the rest would find none
    placed = [(ep.mode, ep.index) for ep in ctx.workers]
    built = set(placed)
    waiting_workers = [k for k in [*where.waiting, *((ep.mode, ep.index) for ep in where.placed)]
                       if k not in built]
    jobs = {(ep.mode, ep.index): where.job_of(ep) for ep in ctx.workers}
    job_of = {k: jobs[w] for w in placed for k in per_worker.instance_keys(specs, *w)}
    workers = [u for u in earlier if not u.is_service]
    gating = per_worker.needs(specs, [(u.role, u.index) for u in workers])
    lives = []
    for s, w in per_worker.attached(specs, workers):
        mode = split_engine(w.role)[0]

        def build(slot: int, s=s, w=w, mode=mode) -> Unit:
            return per_worker.instance_unit(recipe, s, w, where.head, ctx.state_dir, ctx.discovery_env, ctx.container,
                                            jobs[(mode, w.index)], gating.get((mode, w.index), ()))

        lives.append(Life((per_worker.instance_role(s, mode), w.index), build))
    waiting = tuple(k for m, i in waiting_workers for k in per_worker.instance_keys(specs, m, i))
    restart = {per_worker.instance_role(s, m): FAST_RESTART for s in specs for m in s.worker_roles}
    return Offer(tuple(lives), waiting, job_of, restart)
