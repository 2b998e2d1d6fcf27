"""The desired state ``run`` builds for every corpus recipe on running allocations, for the
upgrade check of the desired-state pipeline (tests/test_render_snapshot.py).

Per recipe, three ticks' worth of builds, each recorded with every unit's spec hash, slot,
ports, nodes and GPUs, the old lives beside surges, what waits, and the jobs:
- ``fresh``: its allocations run, nothing launched yet (the port registry it leaves is kept);
- ``adopted``: every unit runs on its current spec (an upgrade must adopt these: no rollout);
- ``outdated``: every unit runs an older spec (the surge lives and their old lives).
The snapshot was taken before the pipeline was restructured, with the registry each build left;
the check rebuilds from that registry, as a reconciler restarted on the new version would.
Regenerate only for an intended change:  python tests/build_snapshot.py
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from render_snapshot import ROOT, corpus_dir  # noqa: E402

SNAPSHOT = ROOT / "tests" / "snapshots" / "corpus-build.json.gz"
STATE = Path("/state")
PYTHON = "/opt/python/bin/python3"


def recipes() -> list[tuple[str, object]]:
    from reconciler.desired.admission import load_file
    from reconciler.errors import RecipeError

    out = []
    corpus = corpus_dir()
    for sub in ("srt-slurm-v1", "srt-slurm-v2"):
        for p in sorted((corpus / sub).rglob("*.yaml")):
            try:
                loaded = load_file(p)
            except RecipeError:
                continue
            out += [(f"{p.relative_to(corpus)}#{lr.recipe.name}", lr.recipe) for lr in loaded]
    for p in sorted((ROOT / "manifests").glob("*.yaml")) + sorted((ROOT / "examples").glob("*.yaml")):
        out += [(f"{p.parent.name}/{p.name}#{lr.recipe.name}", lr.recipe) for lr in load_file(p)]
    return out


def _unit(u) -> dict:
    return {"role": u.role, "index": u.index, "slot": u.slot, "hash": u.spec_hash, "nodes": list(u.nodes),
            "gpus": list(u.gpus), "ports": dict(sorted(u.ports.items())), "health": [u.health_port, u.health_path],
            "needs": [list(k) for k in u.needs]}


def summary(d) -> dict:
    return {
        "allocs": [[a.index, a.start, a.count, a.gpus_per_node] for a in d.allocs],
        "keep": list(d.keep_allocs),
        "services": [_unit(u) for u in d.services],
        "units": [_unit(u) for u in d.units],
        "frontend": _unit(d.frontend) if d.frontend else None,
        "previous": {f"{k[0]}_{k[1]}": _unit(u) for k, u in sorted(d.previous.items())},
        "waiting": sorted(f"{r}_{i}" for r, i in d.waiting),
        "job_of": {f"{k[0]}_{k[1]}": j for k, j in sorted(d.job_of.items())},
        "no_room": sorted(d.no_room),
        "gates": {k: list(v) for k, v in sorted(d.gates.items())},
        "restart": {k: [p.policy, p.backoff_seconds, p.max_backoff_seconds] for k, p in sorted(d.restart.items())},
        "surge": [d.max_surge, d.max_unavailable],
        "surge_allocs": {str(k): [list(x) for x in v] for k, v in sorted(d.surge_allocs.items())},
        "unplaceable": list(d.unplaceable),
    }


def running_allocs(recipe, build) -> list:
    """Every allocation the recipe asks for, running on nodes n<ordinal>."""
    from reconciler.core.ports import NodePortAllocator
    from reconciler.world import Alloc

    want = build(recipe, [], NodePortAllocator(), STATE, PYTHON, []).allocs
    return [Alloc(str(1000 + a.index), recipe.name, a.index, a.start, a.count, "RUNNING",
                  nodes=tuple(f"n{o}" for o in range(a.start, a.start + a.count))) for a in want]


def steps_for(d, stale: bool) -> list:
    from reconciler.world import Step

    out = []
    for n, u in enumerate(d.all_units):
        job = d.job_of.get((u.role, u.index), "")
        for launch in u.launches:
            out.append(Step(f"{job}.{n * 8 + launch.rank}", u.recipe, u.role, u.index, launch.rank,
                            "0ld5pec000" if stale else u.spec_hash, launch.nodes, slot=u.slot))
    return out


def build_all(build, registries: dict[str, dict] | None = None) -> tuple[dict[str, dict], dict[str, dict]]:
    """(key -> the three builds' summaries, key -> the port registry the fresh build left)."""
    from reconciler.core.ports import NodePortAllocator

    out, regs = {}, {}
    for key, recipe in recipes():
        ports = NodePortAllocator.from_dict(registries[key]) if registries is not None else NodePortAllocator()
        allocs = running_allocs(recipe, build)
        fresh = build(recipe, allocs, ports, STATE, PYTHON, [])
        regs[key] = ports.to_dict()
        adopted = build(recipe, allocs, ports, STATE, PYTHON, steps_for(fresh, stale=False))
        outdated = build(recipe, allocs, ports, STATE, PYTHON, steps_for(fresh, stale=True))
        out[key] = {"fresh": summary(fresh), "adopted": summary(adopted), "outdated": summary(outdated)}
    return out, regs


def main() -> None:
    from reconciler.desired.build import build_recipe

    builds, regs = build_all(build_recipe)
    with gzip.open(SNAPSHOT, "wt", encoding="utf-8", compresslevel=9) as f:
        json.dump({"builds": builds, "registries": regs}, f, sort_keys=True, separators=(",", ":"))
    print(f"{len(builds)} recipes -> {SNAPSHOT} ({SNAPSHOT.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
