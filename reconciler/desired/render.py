"""`reconciler render`: a dry run of what a recipe would launch — the desired-state pipeline with
every node ordinal on a named node (``placement.render_placement``), nothing observed."""

from __future__ import annotations

import sys
from pathlib import Path

from reconciler.core.ports import NodePortAllocator
from reconciler.desired.build import assemble
from reconciler.desired.context import context
from reconciler.desired.placement import render_placement
from reconciler.desired.services.layout import total_nodes
from reconciler.desired.topology import topology
from reconciler.recipe.model import Recipe
from reconciler.world import Unit


def render_units(recipe: Recipe, nodes: list[str] | None, state_dir: Path, python: str | None = None) -> list[Unit]:
    top = topology(recipe)
    need = total_nodes(top.layout)  # the workers' nodes and a dedicated services node
    if need == 0:
        return []  # scaled to zero: nothing runs (the loop holds no allocation for it either)
    hostnames = nodes or [f"node{i + 1}" for i in range(need)]
    if len(hostnames) < need:
        raise ValueError(f"the recipe needs {need} nodes, --nodes names {len(hostnames)}")
    ctx = context(top, render_placement(top, hostnames), NodePortAllocator(), state_dir,
                  python or sys.executable, [])
    return list(assemble(ctx).all_units)


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
