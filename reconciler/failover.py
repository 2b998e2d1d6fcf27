"""Shadow-engine recovery (``engine.failover``): the layout, the engines' environment, the rules.

srtctl's design (docs/shadow-engine-recovery.md upstream): every worker runs ``1 +
shadow_engines`` engines on the same GPUs next to a GPU Memory Service (the implied ``gms``
service, one instance per worker) that owns the weights; the engines elect the serving one
with a ``flock`` on ``failover.lock``. Here each engine is a unit of its own (role
``<role>-e<k>``, see ``labels.engine_role``): its own ports, its own steps, relaunched alone
by the role's restart policy. The worker's directory is ``<shared_dir>/<recipe>-<job>/<role>_<index>``
(srtctl: ``srtctl-<job>``; the recipe name keeps two recipes of one reconciler apart even
if one day they share an allocation). Pure.
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


def worker_dir(fo: FailoverConfig, recipe: str, job: str, mode: str, index: int) -> str:
    """The directory one worker's engines and its gms instance share on each of its nodes."""
    return f"{fo.shared_dir.rstrip('/')}/{recipe}-{job}/{mode}_{index}"


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
    from reconciler.services.spec import ServiceError

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
    for i, s in declared:
        if s.placement is not None and s.placement.per != "worker":
            raise ServiceError(f"services.{i}.placement.per", "a gms service runs one instance per worker in that "
                                                              "worker's device view: placement.per must be worker")
