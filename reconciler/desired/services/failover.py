"""srtctl's rules for shadow-engine recovery (``engine.failover``), checked when services are
resolved: each broken rule is a ``ServiceError`` at its key."""

from __future__ import annotations

from collections.abc import Mapping

from reconciler.backends.base import get_key
from reconciler.backends.failover import GMS_KIND, JOB_ID_MAX, SOCKET_NAME_MAX, SUN_PATH_MAX, config_of, worker_dir
from reconciler.errors import ServiceError
from reconciler.recipe.topology import RoleLayout


def check(recipe, layouts: Mapping[str, RoleLayout] | None = None) -> None:
    """srtctl's rules, each at its key: the Dynamo frontend, no sidecar, no data parallel,
    ``load-format`` gms or unset. Raises ServiceError. ``layouts``: the recipe's role layouts, when
    its build computed them already."""
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
                   for m, lay in (layouts if layouts is not None else recipe.role_layouts()).items()), default=0) + 1 + SOCKET_NAME_MAX
    if longest > SUN_PATH_MAX:
        raise ServiceError("engine.failover.shared_dir", f"too long: GMS binds Unix sockets under "
                           f"<shared_dir>/rcl-<job>/<role>_<index>/ and the longest would be {longest} bytes, over "
                           f"the {SUN_PATH_MAX} a socket path may have; use a shorter directory (/dev/shm)")
    for i, s in declared:
        if s.placement is not None and "per" in s.placement.model_fields_set and s.placement.per != "worker":
            raise ServiceError(f"services.{i}.placement.per", "a gms service runs one instance per worker in that "
                                                              "worker's device view: placement.per must be worker")
