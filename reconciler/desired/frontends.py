"""The recipe's frontend as a unit on its head node: one function per frontend type.

``builtin`` is the project's router (it reads the Ready workers from an endpoints file
the shell writes); ``dynamo`` is ``python -m dynamo.frontend`` as srtctl starts it, with
the workers' discovery environment; the SGLang and vLLM routers start empty and are
given the Ready workers through their /workers API. Other types get no process of their
own (yet): the workers serve directly and ``validate`` says so.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from reconciler.backends import dynamo_install
from reconciler.backends.base import Runtime, _norm, cli_args, static_args
from reconciler.core.ports import NodePortAllocator
from reconciler.recipe.model import Recipe
from reconciler.desired.runtime import endpoints_path
from reconciler.world import FRONTEND, Launch, Unit, life_name

# flags the reconciler sets itself (the probe and `get` rely on them): frontend.port, not args
OWNED_ARGS = {"builtin": ("host", "port", "life"), "dynamo": ("http-port", "http-host"), "sglang-router": ("host", "port"),
              "sgl-router": ("host", "port"), "vllm-router": ("host", "port", "worker-urls"),
              "atomesh": ("host", "port", "backend", "worker-urls", "prefill", "decode", "pd-disaggregation"),
              "tilert-router": ("host", "port", "vllm-url", "decode")}


def owned_arg(recipe: Recipe) -> str | None:
    """A key of frontend.args that would override a flag the reconciler sets, or None."""
    owned = OWNED_ARGS.get(recipe.frontend.type, ())
    return next((k for k in recipe.frontend.args if _norm(k) in owned), None)


def frontend_unit(recipe: Recipe, head: str, ports: NodePortAllocator, runtime: Runtime, state_dir: Path,
                  disc_env: Mapping[str, str] | None = None, workers: Sequence[Unit] = (), slot: int = 0,
                  index: int = 0, *, job_container: str | None) -> Unit | None:
    """``job_container``: the job's container image (the context's, computed once; None: the hosts);
    ``workers``: the placed worker units (a static router is given their URLs at start);
    ``slot``: the life slot (the built-in router's second life shares its port; a Dynamo frontend's
    has its own, for a hand-over: it reads the successor's etcd/NATS);
    ``index``: which of the recipe's frontends (``frontend.num_additional_frontends``), on ``head``
    meaning the node it runs on."""
    if recipe.frontend.type == "builtin":  # the project's router: on the host, never in the container
        unit = builtin(recipe, head, ports, runtime, state_dir, disc_env or {}, slot, index)
    elif recipe.frontend.type in STATIC:
        unit = STATIC[recipe.frontend.type](recipe, head, ports, runtime, workers, job_container) if index == 0 else None
    elif recipe.frontend.type == "dynamo":
        unit = dynamo(recipe, head, ports, runtime, state_dir, disc_env or {}, index, slot, job_container)
    else:
        build = MANAGED.get(recipe.frontend.type)
        unit = build(recipe, head, ports, runtime, index, job_container) if build else None
    # Ready means it answers: the model listed and a one-token completion through it (shell/readiness/probe.py)
    return replace(unit, canary=runtime.served_model_name) if unit is not None else None


def _owner(recipe: Recipe, index: int = 0, slot: int = 0) -> str:
    return f"{recipe.name}/{life_name(f'{FRONTEND}_{index}', slot)}"  # the life's name: what bookkeeping keeps alive


def _port(recipe: Recipe, head: str, ports: NodePortAllocator, index: int = 0, slot: int = 0) -> int:
    """``frontend.port`` is the first frontend's; the others (maybe on the same node) get their own."""
    fixed = recipe.frontend.port if index == 0 else None
    return fixed or ports.allocate(head, _owner(recipe, index, slot), "http")


def _unit(recipe: Recipe, head: str, port: int, argv: list[str], env: dict[str, str], container: str | None,
          metrics_path: str | None, worker_api: str = "", ports: dict[str, int] | None = None,
          index: int = 0) -> Unit:
    launch = Launch(0, (head,), 1, None, tuple(argv), tuple(sorted(env.items())))
    srun = tuple(sorted(recipe.srun_options.items()))  # the container's flags: desired/passes.py:wrap
    return Unit(
        recipe=recipe.name, role=FRONTEND, index=index, ordinals=(0,), nodes=(head,), gpus=(),
        ports=ports or {"http": port}, launches=(launch,), container=container, health_port=port,
        health_path="/health", metrics_path=metrics_path, worker_api=worker_api, srun_options=srun,
    )


def builtin(recipe, head, ports, runtime, state_dir, disc_env, slot: int = 0, index: int = 0) -> Unit:
    """Its two lives share the port (SO_REUSEPORT; the newest takes the new connections), so a
    new router starts beside the old one on the same address; each answers the health probe
    of its own life only (``/health?life=a|b``)."""
    port = _port(recipe, head, ports, index)
    argv = [runtime.python, "-m", "reconciler.router", "--host", "0.0.0.0", "--port", str(port),
            "--endpoints-file", str(endpoints_path(state_dir, recipe.name)), "--model-name", runtime.served_model_name]
    argv += ["--life", "b"] if slot else []  # slot a is the router as it was before lives existed
    argv += cli_args(dict(recipe.frontend.args))
    env = {**recipe.environment, **recipe.frontend.env, "PYTHONUNBUFFERED": "1"}
    u = _unit(recipe, head, port, argv, env, None, "/metrics", index=index)
    return replace(u, slot=slot, shares_port=True, health_path=f"/health?life={'ab'[slot]}")


def dynamo(recipe, head, ports, runtime, state_dir, disc_env, index: int, slot: int, job_container: str | None) -> Unit:
    """srtctl: ``python3 -m dynamo.frontend --http-port=P`` + frontend.args, in the job container."""
    port = _port(recipe, head, ports, index, slot)
    container = (recipe.frontend.container_image or job_container) if job_container else None
    pre = dynamo_install.preamble(recipe) if container else []
    argv = [*pre, runtime.engine_python, "-m", "dynamo.frontend", f"--http-port={port}"]
    argv += cli_args(dict(recipe.frontend.args))
    # srtctl frontends/dynamo.py start_frontends: the discovery plane, DYN_REQUEST_PLANE,
    # DYN_SKIP_SGLANG_LOG_FORMATTING=1 (and DYN_EVENT_PLANE), then the recipe's environment and
    # frontend.env. HEAD_NODE_IP is the workers' (worker_stage.py), not the frontend's
    env = {**{k: v for k, v in disc_env.items() if k != "HEAD_NODE_IP"}, "DYN_SKIP_SGLANG_LOG_FORMATTING": "1",
           **recipe.environment, **recipe.frontend.env}
    return replace(_unit(recipe, head, port, argv, env, container, "/metrics", index=index), slot=slot)


def sglang_router(recipe, head, ports, runtime, index: int, job_container: str | None) -> Unit:
    """srtctl: ``python -m sglang_router.launch_router`` with the workers' URLs. Here it starts with
    none and the shell adds and removes workers through its /workers API as they turn Ready."""
    pd = ["--pd-disaggregation"] if recipe.disaggregated else []
    return _managed_router(recipe, head, ports, runtime, "sglang_router.launch_router", pd, "sglang-router", index,
                           job_container)


def vllm_router(recipe, head, ports, runtime, index: int, job_container: str | None) -> Unit | None:
    """``python -m vllm_router.launch_router`` (the ``vllm-router`` console script), started with no
    worker: the shell adds and removes them through its /workers API, as for the SGLang router.
    Its PD mode wants the prefill URLs on the command line at start: not started there (yet)."""
    if recipe.disaggregated:
        return None
    return _managed_router(recipe, head, ports, runtime, "vllm_router.launch_router", [], "vllm-router", index,
                           job_container)


def _managed_router(recipe, head, ports, runtime, module: str, pre: list[str], worker_api: str,
                    index: int, job_container: str | None) -> Unit:
    """A router started empty whose worker set the shell keeps (shell/readiness/router_sync.py)."""
    port = _port(recipe, head, ports, index)
    metrics = ports.allocate(head, _owner(recipe, index), "prometheus")
    argv = [runtime.engine_python, "-m", module, *pre, "--host", "0.0.0.0", "--port", str(port)]
    args = dict(recipe.frontend.args)
    if not any(_norm(k) == "prometheus-port" for k in args):  # its default would collide between recipes
        argv += ["--prometheus-port", str(metrics), "--prometheus-host", "0.0.0.0"]
    argv += cli_args(args)
    env = {"PYTHONUNBUFFERED": "1", **recipe.environment, **recipe.frontend.env}
    return _unit(recipe, head, port, argv, env, job_container, None, worker_api,
                 {"http": port, "prometheus": metrics}, index)


def atomesh(recipe, head, ports, runtime, workers: Sequence[Unit], job_container: str | None) -> Unit | None:
    """srtctl: ``atomesh launch`` with the workers' URLs on its command line (a static router), then
    ``--host 0.0.0.0 --port P --backend atom`` and frontend.args. It starts once a worker is Ready;
    a worker placed later (scale-up, a new allocation) changes its command line: it is restarted.
    Readiness: GET /workers (what srtctl checks). Rendered and tested here; AToMesh needs ROCm."""
    urls = {m: [f"http://{u.nodes[0]}:{u.ports['http']}" for u in workers if u.role == m]
            for m in ("prefill", "decode", "agg")}
    if not any(urls.values()):
        return None  # no worker placed yet: nothing to route to
    port = _port(recipe, head, ports)
    argv = ["atomesh", "launch"]
    if recipe.disaggregated:
        argv += ["--pd-disaggregation", *[x for u in urls["prefill"] for x in ("--prefill", u)],
                 *[x for u in urls["decode"] for x in ("--decode", u)]]
    else:
        argv += ["--worker-urls", *urls["agg"]]
    argv += ["--host", "0.0.0.0", "--port", str(port), "--backend", "atom", *static_args(recipe.frontend.args)]
    env = {**recipe.environment, **recipe.frontend.env}
    container = (recipe.frontend.container_image or job_container) if job_container else None
    unit = _unit(recipe, head, port, argv, env, container, None)
    return replace(unit, health_path="/workers")


def tilert_router(recipe, head, ports, runtime, workers: Sequence[Unit], job_container: str | None) -> Unit | None:
    """srtctl: ``python -m tilert.pd_vllm.pd_router --vllm-url <prefill> --decode host:ctrl:http ...
    --host 0.0.0.0 --port P`` + frontend.args (``--decode`` once: it takes every decode worker).
    Static, like atomesh: a worker placed later restarts it. Readiness GET /health."""
    prefill = [u for u in workers if u.role == "prefill"]
    decode = [u for u in workers if u.role == "decode"]
    if not prefill or not decode:
        return None  # srtctl starts it once every worker is up: here once the pair exists
    port = _port(recipe, head, ports)
    argv = [runtime.engine_python, "-m", "tilert.pd_vllm.pd_router",
            "--vllm-url", f"http://{prefill[0].nodes[0]}:{prefill[0].ports['http']}",
            "--decode", *[f"{u.nodes[0]}:{u.ports['ctrl']}:{u.ports['http']}" for u in decode],
            "--host", "0.0.0.0", "--port", str(port), *static_args(recipe.frontend.args)]
    env = {**recipe.environment, **recipe.frontend.env}
    container = (recipe.frontend.container_image or job_container) if job_container else None
    return _unit(recipe, head, port, argv, env, container, None)


def check(recipe: Recipe) -> tuple[str, str] | None:
    """(key, message) when the frontend cannot serve this recipe's engines (srtctl's rules)."""
    from reconciler.desired.frontend_set import check as check_count

    bad = check_count(recipe)
    if bad is not None:
        return bad
    fe = recipe.frontend.type
    others = sorted({recipe.engine_for(m).type for m, _ in recipe.roles.items()} - {"atom"})
    if fe == "atomesh" and others:
        return "frontend.type", (f"frontend.type atomesh routes ATOM workers only: use engine atom on every role, "
                                 f"or another frontend for {', '.join(others)}")
    if fe != "tilert-router":
        return None
    if recipe.frontend.enable_multiple_frontends is not False:
        return "frontend.enable_multiple_frontends", "tilert-router runs one router: set it to false (srtctl's rule)"
    if set(m for m, _ in recipe.roles.items()) != {"prefill", "decode"} or recipe.engine_for("decode").type != "tilert":
        return "frontend.type", "tilert-router needs roles.prefill (engine vllm) and roles.decode (engine tilert)"
    pre = recipe.roles.get("prefill")
    if recipe.engine_for("prefill").type != "vllm" or "TileRTConnector" not in str(
            next((v for k, v in pre.args.items() if _norm(k) == "kv-transfer-config"), "")):
        return "roles.prefill.args.kv-transfer-config", ("tilert-router needs a vLLM prefill whose "
                                                         "kv-transfer-config names the TileRTConnector")
    if (pre.workers or 1) != 1:
        return "roles.prefill.workers", "tilert-router routes to exactly one prefill worker"
    return None


STATIC: dict[str, Callable[..., Unit | None]] = {"atomesh": atomesh, "tilert-router": tilert_router}
# routers started empty, given their workers through an API: (recipe, head, ports, runtime, index, job_container)
MANAGED: dict[str, Callable[..., Unit | None]] = {
    "sglang-router": sglang_router, "sgl-router": sglang_router, "vllm-router": vllm_router,
}
