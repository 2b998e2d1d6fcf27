"""What every unit source shares: the runtime a recipe's engines get (model path, served name,
interpreters), whether and how its steps run in a container, and a few derived facts."""

from __future__ import annotations

from pathlib import Path

from reconciler.desired import preambles
from reconciler.backends.base import Backend, Runtime
from reconciler.recipe.model import Recipe
from reconciler.backends.registry import backend_of


# frontends that are the engine's own server: the aggregated worker is the public endpoint
DIRECT_FRONTENDS = ("vllm", "sglang")

MODEL_MOUNT = "/model"  # where srtctl mounts a local model directory in the container


def runtime_for(recipe: Recipe, state_dir: Path, python: str = "python3", backend: Backend | None = None) -> Runtime:
    """``backend``: the recipe's, bound once by its build (bound here without it)."""
    backend = backend or backend_of(recipe)
    path = recipe.model.path
    if path.startswith("hf:"):
        # srtctl: the engine gets the bare Hugging Face id and downloads it itself
        path = path[3:]
    return Runtime(
        model_path=MODEL_MOUNT if _model_mount(recipe, backend) else path,
        served_model_name=backend.get_served_model_name(default_served_name(recipe, backend.type)),
        frontend_type=recipe.frontend.type,
        config_dir=str(Path(state_dir).absolute() / recipe.name / "configs"),
        python=python,
        engine_python=recipe.reconcile.engine_python,
    )


def default_served_name(recipe: Recipe, engine: str) -> str:
    """The name clients send in a request's "model" when the recipe names none (an engine's
    ``served_model_name`` or a role's ``served-model-name`` win): the model as the recipe writes it,
    so the README's ``model: {path: "Qwen/Qwen3-0.6B"}`` answers the OpenAI client's
    ``model="Qwen/Qwen3-0.6B"``. Where srtctl has a rule, its rule: it names the real engines'
    ``hf:ORG/NAME`` models by the last component (the golden renders); a local directory (an
    absolute path, which a cluster config's alias also becomes) is served under its directory name
    for every engine, never the path, which differs between the login node and a container. srtctl
    names no model for the mocker (Dynamo serves the path it is given): ``hf:`` is then only where
    the id comes from."""
    path = recipe.model.path.rstrip("/")
    if path.startswith("/") or (path.startswith("hf:") and engine != "mocker"):
        return path.removeprefix("hf:").split("/")[-1] or recipe.name
    return path.removeprefix("hf:") or recipe.name


def _model_mount(recipe: Recipe, backend: Backend | None = None) -> str | None:
    """The host directory mounted at /model: a local model path, when workers run in containers."""
    path = recipe.model.path
    if not _containers_used(recipe, backend) or path.startswith("hf:") or not path.startswith("/"):
        return None
    return path


def _containers_allowed(recipe: Recipe, backend) -> bool:
    return recipe.reconcile.container_runtime != "none" and backend.uses_container()


def _containers_used(recipe: Recipe, backend: Backend | None = None) -> bool:
    return _containers_allowed(recipe, backend or backend_of(recipe)) and any(
        (r.container or recipe.model.container) for _, r in recipe.roles.items())


def container_srun_options(recipe: Recipe, config_dir: str, backend: Backend | None = None) -> dict[str, str]:
    """srtctl's container flags: the model at /model, the config files, the recipe's mounts; no home, no entrypoint."""
    mounts = {}
    if (model := _model_mount(recipe, backend)):
        mounts[model] = MODEL_MOUNT
    mounts[config_dir] = config_dir  # engine config files are written there on the host
    mounts |= preambles.configs_mount(recipe)  # srtctl's configs directory at /configs (setup_script)
    mounts |= dict(recipe.container_mounts)
    for m in recipe.extra_mount or []:
        host, _, ctr = m.partition(":")
        mounts[host] = ctr or host
    return {"container-mounts": ",".join(f"{h}:{c}" for h, c in mounts.items()),
            "no-container-mount-home": "", "no-container-entrypoint": ""}


def nvtx_preset(recipe: Recipe) -> bool:
    """srtctl's automatic nsys preset is on: ``observability.enabled`` and ``observability.nsys``
    not switched off. The workers then get their engine's NVTX environment (no capture runs here)."""
    obs = recipe.observability
    return obs.enabled and obs.nsys.get("enabled", True) is not False


def _container(recipe: Recipe, backend) -> str | None:
    return recipe.model.container if _containers_allowed(recipe, backend) else None


def endpoints_path(state_dir: Path, recipe: str) -> Path:
    return Path(state_dir).absolute() / recipe / "endpoints.json"


def node_count(recipe: Recipe) -> int:
    from reconciler.recipe.topology import allocate

    _, n = allocate(recipe.role_layouts(), recipe.resources.gpus_per_node, recipe.resources.spread_workers)
    return n
