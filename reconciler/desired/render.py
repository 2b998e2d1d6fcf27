"""`reconciler render`: a dry run of what a recipe would launch."""

from __future__ import annotations

import sys
from pathlib import Path

from reconciler.core.ports import NodePortAllocator
from reconciler.desired.preambles import with_cluster_preamble
from reconciler.recipe.model import Recipe
from reconciler.desired.frontends import frontend_unit
from reconciler.desired.services import discovery_of, resolve
from reconciler.desired.services import per_worker
from reconciler.desired.services.units import dedicated_ordinal, discovery_env, mooncake_wiring, service_units, total_nodes
from reconciler.desired.units import _container, runtime_for, worker_units
from reconciler.world import Unit
from reconciler.backends.registry import backend_of, endpoints_of


def render_units(recipe: Recipe, nodes: list[str] | None, state_dir: Path, python: str | None = None) -> list[Unit]:
    specs = resolve(recipe)
    need = total_nodes(recipe, specs)  # the workers' nodes and a dedicated services node
    if need == 0:
        return []  # scaled to zero: nothing runs (the loop holds no allocation for it either)
    hostnames = nodes or [f"node{i + 1}" for i in range(need)]
    if len(hostnames) < need:
        raise ValueError(f"the recipe needs {need} nodes, --nodes names {len(hostnames)}")
    ports = NodePortAllocator()
    runtime = runtime_for(recipe, state_dir, python or sys.executable)
    endpoints = endpoints_of(recipe)
    ded = dedicated_ordinal(recipe, specs)
    ded_host = hostnames[ded] if ded is not None else None
    disc_env = discovery_env(recipe, specs, discovery_of(recipe), hostnames[0], ports, state_dir, ded_host)
    services = service_units(recipe, specs, hostnames[0], ports, state_dir, disc_env,
                             _container(recipe, backend_of(recipe)), dict(enumerate(hostnames)))
    wiring = mooncake_wiring(recipe, specs, hostnames[0], ports, runtime.config_dir, runtime.served_model_name,
                             ded_host)
    workers = [(ep.mode, ep.index) for ep in endpoints]
    units = worker_units(recipe, endpoints, dict(enumerate(hostnames)), ports, runtime, disc_env, wiring,
                         needs=per_worker.needs(specs, workers))
    services += per_worker.units(recipe, specs, units, hostnames[0], state_dir, disc_env,
                                 _container(recipe, backend_of(recipe)), {})
    fe = frontend_unit(recipe, hostnames[0], ports, runtime, state_dir, disc_env, units)
    return [with_cluster_preamble(u, recipe) for u in services + units + ([fe] if fe else [])]


def as_rows(units: list[Unit]) -> list[dict]:
    rows = []
    for u in units:
        for l in u.launches:
            rows.append({
                "role": u.role, "index": u.index, "rank": l.rank, "nodes": list(l.nodes), "gpus": list(l.gpus),
                "ports": dict(sorted(u.ports.items())), "env": dict(l.env), "argv": list(l.argv),
                "ntasks": l.ntasks, "mpi": l.mpi, "container": u.container, "spec_hash": u.spec_hash,
                "srun_options": dict(u.srun_options),
                "health": f"http://{u.nodes[0]}:{u.health_port}{u.health_path}" if u.health_port else None,
                "metrics": f"http://{u.nodes[0]}:{u.health_port}{u.metrics_path}"
                if u.health_port and u.metrics_path else None,
                "files": sorted(u.files), "probe": u.probe, **({"phase": u.phase} if u.phase else {}),
            })
    return rows
