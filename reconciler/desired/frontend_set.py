"""How many frontends a recipe runs and on which nodes: srtctl's ``enable_multiple_frontends`` /
``num_additional_frontends``, with srtctl's defaults and placement rules.

Facts from srtctl (src/srtctl/core/schema.py ``FrontendConfig``, cli/mixins/frontend_stage.py
``_compute_frontend_topology``): ``enable_multiple_frontends`` defaults to true and
``num_additional_frontends`` to 9. On a job of two or more nodes with several enabled, srtctl
runs one frontend on each node other than the head (the head keeps nginx, etcd and NATS), at
most ``1 + num_additional_frontends`` of them; on a one-node job, or with several disabled, it
runs one frontend on the head. So a recipe that says nothing runs as many frontends as its job
has nodes besides the head, up to 10.

Here the gateway (``shell/gateway/host.py``) replaces srtctl's nginx and runs next to the
reconciler, so every frontend is an upstream of it; each frontend is a unit of its own
(``frontend_<i>``) with its own lives, ports and restarts.

Which types: the routers that take any number of replicas — Dynamo's frontend (each reads the
workers from etcd/NATS or file discovery), the SGLang and vLLM routers (each given the Ready
workers through its /workers API) and the built-in router (each reads the endpoints file). The
static routers (atomesh, tilert-router) are started with their workers on their command line and
run once, as in srtctl. The built-in router is this project's own type: srtctl has no rule
for it, so it runs one frontend unless the recipe asks for more, and then as many as it asks,
round-robin over the nodes other than the head (on the head when the job has no other) -- the
way to run several frontends behind the gateway on one node.
"""

from __future__ import annotations

from collections.abc import Sequence

from reconciler.recipe.model import Recipe

SRTCTL_DEFAULT_ADDITIONAL = 9  # srtctl FrontendConfig.num_additional_frontends
MULTI = ("dynamo", "sglang-router", "sgl-router", "vllm-router", "builtin")  # replicable routers
SRTCTL_DEFAULT_ON = ("dynamo", "sglang-router", "sgl-router", "vllm-router")  # srtctl's own types
MAX_FRONTENDS = 64  # a bound on what a recipe can ask for (each is a process and a port)


def several(recipe: Recipe) -> bool:
    """srtctl's ``enable_multiple_frontends`` for a replicable router (its default for its own types)."""
    fe = recipe.frontend
    if fe.type not in MULTI:
        return False
    default_on = fe.type in SRTCTL_DEFAULT_ON or fe.num_additional_frontends is not None
    return fe.enable_multiple_frontends if fe.enable_multiple_frontends is not None else default_on


def frontend_count(recipe: Recipe) -> int:
    """1 + num_additional_frontends when multiple frontends are enabled for a replicable router, else 1."""
    if not several(recipe):
        return 1
    extra = recipe.frontend.num_additional_frontends
    extra = SRTCTL_DEFAULT_ADDITIONAL if extra is None else extra
    return 1 + max(0, min(int(extra), MAX_FRONTENDS - 1))


def frontend_nodes(count: int, nodes: Sequence[str], head: str, *, own: bool = False,
                   enabled: bool | None = None) -> list[str]:
    """Where the frontends run. srtctl's rule: with several ``enabled`` on a job of two or more
    nodes, one on each node other than the head, at most ``count`` (so one frontend, with
    ``num_additional_frontends: 0``, runs off the head, nginx on it); else one on the head. ``own``
    (the built-in router, which srtctl does not know) keeps ``count``, round-robin off the head."""
    others = [n for n in nodes if n != head]
    if own:
        if count <= 1:
            return [head]
        pool = others or [head]
        return [pool[i % len(pool)] for i in range(count)]
    if not (count > 1 if enabled is None else enabled) or not others:
        return [head]
    return others[:count]


def check(recipe: Recipe) -> tuple[str, str] | None:
    """(key, message) for a frontend count that cannot be acted on."""
    n = recipe.frontend.num_additional_frontends
    if n is not None and not 0 <= n < MAX_FRONTENDS:
        return "frontend.num_additional_frontends", f"expected 0..{MAX_FRONTENDS - 1}, found {n}"
    return None
