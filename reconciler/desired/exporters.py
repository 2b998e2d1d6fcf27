"""A process exporter's group file for a recipe (ncabatoff/process-exporter ``-config.path``).

srtctl writes one per run for its host-native process exporter: the Dynamo frontend first
(the process whose CPU matters most), then the groups of every engine the recipe runs
(``Backend.process_exporter_groups``: launchers before what they wrap, retitled engine
children, handlers), then routers and infra daemons; first match wins, a name two engines
share is written once, and nothing is caught by a catch-all. The reconciler starts no
exporter; ``reconciler render RECIPE --process-exporter`` prints the file for one that the
site runs. Pure.
"""

from __future__ import annotations

import yaml

from reconciler.backends.base import ProcessGroup
from reconciler.recipe.model import Recipe
from reconciler.backends.registry import backend_for, backend_of

LEADING = (ProcessGroup("frontend", cmdline=(r"dynamo\.frontend",)),)
TRAILING = (
    ProcessGroup("reconciler_router", cmdline=(r"reconciler\.router",)),
    ProcessGroup("sglang_router", cmdline=(r"sglang_router\.launch_router",)),
    ProcessGroup("vllm_router", comm=("vllm-router",)),
    ProcessGroup("gms", cmdline=(r"gpu_memory_service",)),
    ProcessGroup("mooncake_master", comm=("mooncake_master",)),
    ProcessGroup("etcd", comm=("etcd",)),
    ProcessGroup("nats", comm=("nats-server",)),
)


def groups(recipe: Recipe) -> list[ProcessGroup]:
    engines = [backend_for(recipe, m) for m, _ in recipe.roles.items()] or [backend_of(recipe)]
    out: dict[str, ProcessGroup] = {}
    for g in (*LEADING, *(g for b in engines for g in b.process_exporter_groups), *TRAILING):
        out.setdefault(g.name, g)
    return list(out.values())


def config_text(recipe: Recipe) -> str:
    entries = []
    for g in groups(recipe):
        entry: dict[str, object] = {"name": g.name}
        if g.cmdline:
            entry["cmdline"] = list(g.cmdline)
        if g.comm:
            entry["comm"] = list(g.comm)
        entries.append(entry)
    header = f"# process-exporter groups for {recipe.name} (reconciler render --process-exporter). First match wins.\n"
    return header + yaml.safe_dump({"process_names": entries}, sort_keys=False, width=10_000)
