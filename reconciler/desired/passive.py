"""What a recipe sets that the reconciler carries without acting on.

srt-slurm users lost runs to keys that were silently dropped, so nothing is:
every key is acted on, rejected by the schema with a located error, or listed
here, with why, for ``validate`` and ``render`` to report. A key is listed only
when the recipe sets it (pydantic's ``model_fields_set``; for engine knobs, a
value other than the default).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from reconciler.recipe.model import ACTED_ON, Recipe
from reconciler.backends.registry import backend_of, bind

SECTION_WHY = "srtctl section: validated, not acted on"

# dotted path (``*`` = every declared role) -> why it has no effect here
NESTED: dict[str, str] = {
    "model.precision": "informational in srtctl too",
    "model.stage_dir": "models are not staged; workers read model.path",
    "resources.gpu_type": "no GPU-type specific flags are rendered",
    "resources.het_jobs": "one homogeneous job per allocation",
    "roles.*.kv_events": "no KV-event publisher is configured (only SGLang and dynamo.vllm workers get --kv-events-config)",
    "roles.*.sidecar": "no Dynamo sidecar is started",
    "roles.*.mooncake_store_config": "read by TRT-LLM's mooncake-store connector only, beside a mooncake-master",
    "roles.*.critical": "a worker that stays down marks the recipe Degraded; nothing else is torn down",
    "frontend.nginx_container": "the gateway is the host's own nginx beside the reconciler, not a container",
    "frontend.nginx_raise_ulimit": "the gateway's nginx runs with the reconciler's limits",
    "frontend.nginx_session_affinity": "the gateway balances round-robin (no session affinity)",
    "frontend.nginx_session_affinity_header": "the gateway balances round-robin (no session affinity)",
    "frontend.nginx_keepalive_timeout": "the gateway keeps client connections 75 s",
    "frontend.worker_selection": "no --router-policy-config is written for the Dynamo frontend",
    "frontend.numa_bind": "the frontend gets no numactl prefix",
    "frontend.ctx_router": "read by the trtllm_serve disaggregated orchestrator, which is not started",
    "frontend.gen_router": "read by the trtllm_serve disaggregated orchestrator, which is not started",
    "frontend.server_config_extra": "read by the trtllm_serve disaggregated orchestrator, which is not started",
    "frontend.placement": "the frontend runs on the recipe's head node",
    "dynamo.hash": "Dynamo is not built from source here; use dynamo.source.pypi or a wheel (or an image with it)",
    "dynamo.top_of_tree": "Dynamo is not built from source here; use dynamo.source.pypi or a wheel",
    "dynamo.source.git": "Dynamo is not built from source here; use dynamo.source.pypi or a wheel",
    "dynamo.source.rev": "Dynamo is not built from source here",
    "dynamo.source.sha": "Dynamo is not built from source here",
    "dynamo.source.patches": "Dynamo is not built from source here",
    "dynamo.sidecar": "no Dynamo sidecar is started",
    "dynamo.sidecar_port": "no Dynamo sidecar is started",
    "dynamo.sidecar_binary": "no Dynamo sidecar is started",
    "dynamo.sidecar_startup_timeout": "no Dynamo sidecar is started",
    "dynamo.sidecar_context_length": "no Dynamo sidecar is started",
    "dynamo.sidecar_args": "no Dynamo sidecar is started",
}
# frontends that need no process of their own here: ours, none, or the worker serving directly
RUNS_FRONTEND = ("builtin", "dynamo", "sglang-router", "sgl-router", "vllm-router", "atomesh", "tilert-router", "none",
                 "vllm", "trtllm_serve")


def not_acted_on(recipe: Recipe, data: dict[str, Any]) -> dict[str, str]:
    """Key path (schema 2 spelling) -> why it is carried without effect. Each helper below
    answers for one part of the recipe; a later one may say more of a key an earlier one named."""
    from reconciler.desired import preambles
    from reconciler.desired.runtime import _containers_used, nvtx_preset

    out: dict[str, str] = {k: SECTION_WHY for k in sorted(data) if k not in ACTED_ON}
    out |= _nested(recipe)
    out |= _mooncake_carried(recipe)
    if "observability" in out and nvtx_preset(recipe):
        out["observability"] = ("only the nsys preset's NVTX environment reaches the workers (Backend.nvtx_environment); "
                                "no nsys capture, tachometer or OTEL export runs")
    out |= _frontend_not_started(recipe)
    containers = _containers_used(recipe)
    out |= _engine_knobs(recipe)
    out |= _dynamo_install(recipe, containers)
    out |= preambles.not_acted_on(recipe, containers)
    out |= _mounts_and_extra_args(recipe, data, containers)
    out |= _read_by_what_does_not_run(recipe, data)
    return out


def _nested(recipe: Recipe) -> dict[str, str]:
    """NESTED's keys the recipe sets, but those its engine or connector does read."""
    from reconciler.backends.base import get_key

    roles = [m for m, _ in recipe.roles.items()]
    out = {path: why for pattern, why in NESTED.items() for path in _expand(pattern, roles)
           if _is_set(recipe, path.split("."))}
    for m in roles:  # SGLang and dynamo.vllm get --kv-events-config from it (srtctl); other engines do not
        engine = recipe.engine_for(m).type
        if engine == "sglang" or (engine == "vllm" and recipe.frontend.type == "dynamo"):
            out.pop(f"roles.{m}.kv_events", None)
    if recipe.serving_engine.type == "trtllm" and _has_mooncake_master(recipe):
        for m, r in recipe.roles.items():  # a role whose connector reads the store config gets its file
            conn = get_key(r.args, "kv_connector_config")
            if isinstance(conn, dict) and conn.get("connector") == "mooncake-store":
                out.pop(f"roles.{m}.mooncake_store_config", None)
    return out


def _frontend_not_started(recipe: Recipe) -> dict[str, str]:
    fe, out = recipe.frontend, {}
    if fe.type not in RUNS_FRONTEND or (fe.type == "vllm-router" and recipe.disaggregated):
        what = f"no {fe.type} frontend is started yet" + (" in front of disaggregated workers" if fe.type == "vllm-router" else "")
        out["frontend.type"] = f"{what} (builtin, dynamo, sglang-router, atomesh, tilert-router and aggregated vllm-router run); workers serve directly"
        if fe.args:
            out["frontend.args"] = f"read by the {fe.type} frontend, which is not started"
        if fe.env:
            out["frontend.env"] = f"read by the {fe.type} frontend, which is not started"
    return out


def _engine_knobs(recipe: Recipe) -> dict[str, str]:
    """Each engine's own knobs its backend does not act on (Backend.not_acted_on)."""
    engines = [("engine", recipe.engine)] if recipe.engine is not None else [
        (f"roles.{m}.engine", r.engine) for m, r in recipe.roles.items()
    ]
    return {f"{prefix}.{knob}": why for prefix, engine in engines if engine is not None
            for knob, why in bind(engine, recipe).not_acted_on().items()}


def _dynamo_install(recipe: Recipe, containers: bool) -> dict[str, str]:
    from reconciler.backends.dynamo_install import install_spec

    fe, out = recipe.frontend, {}
    asks = any(_is_set(recipe, ["dynamo", k]) for k in ("install", "version", "wheel", "source"))
    if asks and install_spec(recipe) is not None and not containers:
        out["dynamo.install"] = "workers run on the hosts: the host Python's Dynamo is used, nothing is installed"
    if fe.type != "dynamo" and asks and recipe.dynamo.install:
        out["dynamo.install"] = f"srtctl installs Dynamo only behind the Dynamo frontend; this recipe uses {fe.type}"
    return out


def _mounts_and_extra_args(recipe: Recipe, data: dict[str, Any], containers: bool) -> dict[str, str]:
    out = {}
    if not containers:
        for key in ("container_mounts", "extra_mount"):
            if key in data:
                out[key] = "no worker runs in a container: there is nothing to mount into"
    backend = backend_of(recipe)
    for mode, role in recipe.roles.items():
        if role.extra_args and not backend.reads_extra_args(mode):
            out[f"roles.{mode}.extra_args"] = (
                f"{backend.type} does not read extra_args (srtctl passes them to trtllm-serve only); use args"
            )
    return out


def _read_by_what_does_not_run(recipe: Recipe, data: dict[str, Any]) -> dict[str, str]:
    """Keys only a program this recipe does not start reads: a metrics scraper, a service build,
    a router's own container, NATS and Dynamo's planes without the Dynamo frontend."""
    fe, out = recipe.frontend, {}
    for i, svc in enumerate(recipe.services):
        if "metrics" in svc.model_fields_set:
            out[f"services.{i}.metrics"] = "no metrics scraper (tachometer) is run"
        if "build_timeout_seconds" in svc.model_fields_set:
            out[f"services.{i}.build_timeout_seconds"] = "services are not built from source"
    if fe.type not in ("dynamo", "atomesh", "tilert-router") and _is_set(recipe, ["frontend", "container_image"]):
        out["frontend.container_image"] = "only the Dynamo, AToMesh and TileRT routers run in their own container here"
    if fe.type != "dynamo" and _is_set(recipe, ["infra", "nats_max_payload_mb"]):
        out["infra.nats_max_payload_mb"] = "no NATS runs without the Dynamo frontend"
    if fe.type != "dynamo" and _is_set(recipe, ["dynamo", "event_plane"]):
        out["dynamo.event_plane"] = f"only Dynamo components read it; this recipe uses the {fe.type} frontend"
    if fe.type != "dynamo" and "dynamo" in data and _is_set(recipe, ["dynamo", "request_plane"]):
        out["dynamo.request_plane"] = f"only Dynamo components read it; this recipe uses the {fe.type} frontend"
    return out


def _expand(pattern: str, roles: list[str]) -> list[str]:
    return [pattern.replace("*", m) for m in roles] if "*" in pattern else [pattern]


def _is_set(obj: Any, parts: list[str]) -> bool:
    for i, part in enumerate(parts):
        if isinstance(obj, BaseModel) and hasattr(obj, "get") and part in ("prefill", "decode", "agg"):
            obj = obj.get(part)  # Roles
            if obj is None:
                return False
            continue
        if not isinstance(obj, BaseModel):
            return False
        if i == len(parts) - 1:
            return part in obj.model_fields_set and getattr(obj, part) is not None
        obj = getattr(obj, part, None)
    return False


def _has_mooncake_master(recipe: Recipe) -> bool:
    from reconciler.desired.services.mooncake import store_of
    from reconciler.desired.services.spec import ServiceError

    try:
        return store_of(recipe) is not None
    except ServiceError:
        return False


def _mooncake_carried(recipe: Recipe) -> dict[str, str]:
    """store_config is read by vLLM and TRT-LLM only."""
    if recipe.serving_engine.type in ("vllm", "trtllm"):
        return {}
    why = "read by vLLM and TRT-LLM workers only (as the JSON file MOONCAKE_CONFIG_PATH names)"
    out = {}
    kv = recipe.serving_engine.mooncake_kv_store
    if kv is not None and kv.store_config is not None:
        out["engine.mooncake_kv_store.store_config"] = why
    for i, svc in enumerate(recipe.services):
        if svc.type == "mooncake-master" and "store_config" in svc.options:
            out[f"services.{i}.options.store_config"] = why
    return out
