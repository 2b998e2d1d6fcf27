"""Shadow-engine recovery (``engine.failover``): the layout, the engines' environment, the rules.

srtctl's design (docs/shadow-engine-recovery.md upstream): every worker runs ``1 +
shadow_engines`` engines on the same GPUs next to a GPU Memory Service (the implied ``gms``
service, one instance per worker) that owns the weights; the engines elect the serving one
with a ``flock`` on ``failover.lock``. Here each engine is a unit of its own (role
``<role>-e<k>``, see ``labels.engine_role``): its own ports, its own steps, relaunched alone
by the role's restart policy. The worker's directory is ``<shared_dir>/rcl-<job>/<role>_<index>``
(srtctl: ``srtctl-<job>``). An allocation belongs to one recipe, so the job id tells recipes
apart; the recipe's name is not in the path because GMS binds Unix sockets there, named
after a 40-character GPU UUID, and a socket path has at most 107 bytes (``check`` refuses a
``shared_dir`` too long for them). Pure.
"""

from __future__ import annotations

from reconciler.recipe.failover import FailoverConfig

LOCK_FILE = "failover.lock"
READY_MARKER = "GMS ready:"
GMS_KIND = "gms"
RENDER_JOB = "<job>"  # render has no allocation: the path shows where the job id goes


def config_of(recipe) -> FailoverConfig | None:
    return getattr(recipe.serving_engine, "failover", None)


def engines_per_worker(recipe) -> int:
    fo = config_of(recipe)
    return fo.engines if fo is not None else 1


# the longest socket GMS binds there: gms_<GPU-UUID>_kv_cache.sock, UUID "GPU-" + 36
SOCKET_NAME_MAX = len("gms_") + 40 + len("_kv_cache.sock")
SUN_PATH_MAX = 107  # struct sockaddr_un.sun_path is 108 bytes with the terminating NUL
JOB_ID_MAX = 12  # room for a job id (Slurm's are 32-bit: 10 digits) and then some


def worker_dir(fo: FailoverConfig, recipe: str, job: str, mode: str, index: int) -> str:
    """The directory one worker's engines and its gms instance share on each of its nodes
    (``recipe``: unused in the path, see the module docstring; kept for the call sites' sake)."""
    return f"{fo.shared_dir.rstrip('/')}/rcl-{job}/{mode}_{index}"


def engine_environment(fo: FailoverConfig, directory: str, engine: int) -> dict[str, str]:
    """What every engine of a failover worker gets: the names Dynamo's operator injects."""
    return {
        "ENGINE_ID": str(engine),
        "GMS_SOCKET_DIR": directory,
        "FAILOVER_LOCK_PATH": f"{directory}/{LOCK_FILE}",
        "DYN_VLLM_GMS_SHADOW_MODE": "true",
        # a shadow's /health answers notready until it holds the lock, then healthy while parked
        "DYN_SYSTEM_STARTING_HEALTH_STATUS": "notready",
    }
