"""The frontend's unit source: the recipe's router on its head node (``desired/frontends.py``: one
builder per frontend type), once the head allocation runs. The built-in router's two lives share
its port, so a new one starts beside the old one and it keeps its address when it moves; every
other frontend is replaced in place. Static routers are given the worker units built before it."""

from __future__ import annotations

from reconciler.desired.context import Context
from reconciler.desired.frontends import frontend_unit
from reconciler.desired.sources.base import FAST_RESTART, Life, Offer
from reconciler.world import FRONTEND, Unit


def offer(ctx: Context, earlier: tuple[Unit, ...]) -> Offer:
    head = ctx.where.head
    restart = {FRONTEND: FAST_RESTART}
    if head is None:
        return Offer(restart=restart)
    workers = tuple(u for u in earlier if not u.is_service)

    def build(slot: int) -> Unit | None:
        return frontend_unit(ctx.recipe, head, ctx.ports, ctx.runtime, ctx.state_dir, ctx.discovery_env, workers, slot)

    first = build(0)
    shared = first is not None and first.shares_port
    life = Life((FRONTEND, 0), build, slotted=shared, surges=shared, shares_address=shared)
    return Offer((life,), job_of={(FRONTEND, 0): ctx.where.head_job or ""}, restart=restart)
