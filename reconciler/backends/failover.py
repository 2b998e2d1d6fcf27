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

from reconciler.backends.base import get_key
from reconciler.recipe.failover import FailoverConfig

LOCK_FILE = "failover.lock"
READY_MARKER = "GMS ready:"
GMS_KIND = "gms"
RENDER_JOB = "<job>"  # render has no allocation: the path shows where the job id goes


def config_of(recipe) -> FailoverConfig | None:
    return getattr(recipe.backend, "failover", None)


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


def check(recipe) -> None:
    """srtctl's rules, each at its key: the Dynamo frontend, no sidecar, no data parallel,
    ``load-format`` gms or unset. Raises ServiceError."""
    from reconciler.desired.services.spec import ServiceError

    fo = config_of(recipe)
    declared = [(i, s) for i, s in enumerate(recipe.services) if s.type == GMS_KIND and s.enabled]
    if fo is None:
        if declared:
            raise ServiceError(f"services.{declared[0][0]}.type", "a gms service needs engine.failover (the engines "
                                                                  "load their weights through it)")
        return
    if recipe.frontend.type != "dynamo":
        raise ServiceError("frontend.type", f"engine.failover needs frontend.type: dynamo (the election lives in "
                                            f"the Dynamo worker; a static router would list the parked shadows), "
                           f"found {recipe.frontend.type!r}")
    if recipe.dynamo.sidecar:
        raise ServiceError("dynamo.sidecar", "engine.failover does not run in Dynamo sidecar mode")
    for m, r in recipe.roles.items():
        if r.sidecar:
            raise ServiceError(f"roles.{m}.sidecar", "engine.failover does not run in Dynamo sidecar mode")
        dp = get_key(r.args, "data-parallel-size", "dp")
        if dp is not None and str(dp) != "1":
            raise ServiceError(f"roles.{m}.args.data-parallel-size", f"engine.failover does not support data "
                               f"parallel (each DP rank would need its own GMS session and lock), found {dp!r}")
        lf = get_key(r.args, "load-format")
        if lf is not None and lf != "gms":
            raise ServiceError(f"roles.{m}.args.load-format", f"engine.failover loads weights through GMS: "
                                                             f"load-format must be gms or unset, found {lf!r}")
    longest = max((len(worker_dir(fo, recipe.name, "9" * JOB_ID_MAX, m, max(0, lay.workers - 1)))
                   for m, lay in recipe.role_layouts().items()), default=0) + 1 + SOCKET_NAME_MAX
    if longest > SUN_PATH_MAX:
        raise ServiceError("engine.failover.shared_dir", f"too long: GMS binds Unix sockets under "
                           f"<shared_dir>/rcl-<job>/<role>_<index>/ and the longest would be {longest} bytes, over "
                           f"the {SUN_PATH_MAX} a socket path may have; use a shorter directory (/dev/shm)")
    for i, s in declared:
        if s.placement is not None and "per" in s.placement.model_fields_set and s.placement.per != "worker":
            raise ServiceError(f"services.{i}.placement.per", "a gms service runs one instance per worker in that "
                                                              "worker's device view: placement.per must be worker")
