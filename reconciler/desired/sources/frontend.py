"""The frontend's unit source: the recipe's routers (1 + frontend.num_additional_frontends, each a
unit ``frontend_<i>`` of its own; one on the head node, several on srtctl's nodes) (``desired/frontends.py``: one
builder per frontend type), once the head allocation runs. The built-in router's two lives share
its port, so a new one starts beside the old one and it keeps its address when it moves; a
Dynamo frontend moved to a successor allocation starts beside its old life on its own port (it
reads the successor's etcd/NATS), unless ``frontend.port`` pins it; every other frontend is
replaced in place. Static routers are given the worker units built before it."""

from __future__ import annotations

from reconciler.desired.context import Context
from reconciler.desired.frontend_set import frontend_count, frontend_nodes, several
from reconciler.desired.frontends import frontend_unit
from reconciler.desired.sources.base import STATELESS_RESTART, Life, Offer
from reconciler.world import FRONTEND, Unit


def offer(ctx: Context, earlier: tuple[Unit, ...]) -> Offer:
    head = ctx.where.head
    restart = {FRONTEND: STATELESS_RESTART}
    if head is None:
        return Offer(restart=restart)
    workers = tuple(u for u in earlier if not u.is_service)
    # 1 + frontend.num_additional_frontends, on srtctl's nodes: the head job's worker nodes
    # (never the dedicated infra node), one per node off the head (desired/frontend_set.py)
    pool = [h for o, h in sorted(ctx.where.hosts.items())
            if ctx.where.jobs.get(o) == ctx.where.head_job and o != ctx.top.dedicated]
    own = ctx.recipe.frontend.type == "builtin"
    nodes = frontend_nodes(frontend_count(ctx.recipe), pool or [head], head, own=own, enabled=several(ctx.recipe))
    lives, job_of = [], {}
    for index, node in enumerate(nodes):
        def build(slot: int, node: str = node, index: int = index) -> Unit | None:
            return frontend_unit(ctx.recipe, node, ctx.ports, ctx.runtime, ctx.state_dir, ctx.discovery_env, workers,
                                 slot, index, job_container=ctx.container)

        first = build(0)
        if first is None and index:
            continue
        shared = first is not None and first.shares_port
        # a Dynamo frontend reads etcd/NATS: on a hand-over it moves with them, beside its old life
        moves = ctx.recipe.frontend.type == "dynamo" and not (index == 0 and ctx.recipe.frontend.port)
        lives.append(Life((FRONTEND, index), build, slotted=shared or moves, surges=shared, shares_address=shared,
                          moves=moves))
        job_of[(FRONTEND, index)] = ctx.where.head_job or ""
    return Offer(tuple(lives), job_of=job_of, restart=restart)
