"""The desired pipeline computes each fact once per build (issue 45): one Backend bind per engine the
recipe names, ``Recipe.role_layouts`` and ``recipe.topology.allocate`` once, the Mooncake store and
the discovery plane once; and plan() reads the dependency graph the build made instead of scanning
every unit again. Each count is taken by wrapping the function everywhere it is reachable (the
class attribute, or every module that imported it by name), so a stage that derives a fact again
makes its count grow and the test fail."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest

from render_snapshot import corpus_dir
from reconciler.backends.base import Backend
from reconciler.core.plan import dependents as deps
from reconciler.core.plan import plan
from reconciler.core.ports import NodePortAllocator
from reconciler.desired import build as build_mod
from reconciler.desired.admission import load_file, load_text
from reconciler.desired.render import render_units
from reconciler.desired.scale import Scale
from reconciler.desired.services import mooncake, types
from reconciler.desired.topology import topology
from reconciler.recipe import topology as recipe_topology
from reconciler.recipe.model import Recipe
from reconciler.world import Alloc, Desired, Observed

ROOT = Path(__file__).resolve().parent.parent

# autoscaled: the topology stage builds it at the autoscaler's counts (scaled recipe, extra workers)
SCALED = """\
name: d
model: {path: /m}
resources: {gpus_per_node: 4}
engine: mocker
frontend: {type: dynamo}
dynamo: {request_plane: nats}
infra: {etcd_nats_dedicated_node: true}
roles:
  prefill: {workers: 2, gpus: 4, nodes: 2}
  decode: {workers: 2, gpus: 8, nodes: 4}
reconcile:
  autoscale:
    roles:
      prefill: {min: 1, max: 3, target: {waiting_per_worker: 2}}
      decode: {min: 1, max: 5, target: {itl_p90_ms: 40}}
"""


def _recipes() -> list[Recipe]:
    files = [ROOT / "examples" / "mocker-agg.yaml", ROOT / "examples" / "mocker-disagg.yaml"]
    corpus = corpus_dir() / "srt-slurm-v2"
    files += [corpus / "trtllm" / "dynamo-disagg-mooncake.yaml", corpus / "features" / "services.yaml",
              corpus / "llm" / "vllm" / "qwen3-32b-disaggregated.yaml"]
    return [lr.recipe for f in files for lr in load_file(f)]


@pytest.fixture
def counts(monkeypatch) -> Counter:
    """Calls per counted function, from the moment the fixture is set up."""
    seen: Counter = Counter()

    def counting(name, f):
        def wrapper(*a, **kw):
            seen[name] += 1
            return f(*a, **kw)
        return wrapper

    monkeypatch.setattr(Backend, "bind", counting("bind", Backend.bind))
    monkeypatch.setattr(Recipe, "role_layouts", counting("role_layouts", Recipe.role_layouts))
    for name, f in [("allocate", recipe_topology.allocate), ("store_of", mooncake.store_of),
                    ("discovery_of", types.discovery_of), ("graph", deps.graph)]:
        wrapped = counting(name, f)
        for module in list(sys.modules.values()):
            if module is not None and module.__name__.startswith("reconciler") and getattr(module, name, None) is f:
                monkeypatch.setattr(module, name, wrapped)
    return seen


def _engines(r: Recipe) -> int:
    return len({id(r.engine_for(m)) for m, _ in r.roles.items()} | {id(r.serving_engine)})


def _running(r: Recipe, counts: dict[str, int] | None = None) -> list[Alloc]:
    """One running allocation per node the recipe's layout names (elastic ones included)."""
    lay = topology(r, counts=counts).layout
    ordinals = sorted({o for ep in lay.endpoints for o in ep.nodes} | ({lay.dedicated} if lay.dedicated is not None
                                                                         else set()))
    return [Alloc(f"{100 + k}", r.name, k, o, 1, "RUNNING", "None", (f"n{o}",)) for k, o in enumerate(ordinals)]


@pytest.mark.parametrize("r", _recipes(), ids=lambda r: r.name)
def test_a_render_computes_each_fact_once(r, counts):
    units = render_units(r, None, Path("/state"), "python3")
    assert units
    assert counts["bind"] == _engines(r) == 1, counts
    assert counts["role_layouts"] == 1 and counts["allocate"] == 1, counts
    assert counts["store_of"] == 1 and counts["discovery_of"] == 1, counts


def test_a_build_at_the_autoscalers_counts_computes_each_fact_once(counts):
    r = load_text(SCALED, "d.yaml").recipe
    sc = Scale({"prefill": 3, "decode": 1})
    allocs = _running(r, dict(sc.counts))
    counts.clear()
    d = build_mod.build_recipe(r, allocs, NodePortAllocator(), Path("/state"), "python3", [], sc)
    assert len([u for u in d.units if u.role == "prefill"]) == 3
    assert counts["bind"] == 1 and counts["role_layouts"] == 1 and counts["allocate"] == 1, counts
    assert counts["store_of"] == 1 and counts["discovery_of"] == 1, counts


def test_the_dependency_graph_is_built_once_and_plan_reads_it(counts):
    """A Dynamo recipe's units read etcd's and NATS's addresses: the build records who, plan() does not scan again."""
    r = load_text(SCALED, "d.yaml").recipe
    allocs = _running(r)
    d = build_mod.build(
        {r.name: r}, Observed(tuple(allocs), ()), NodePortAllocator(), Path("/state"), "python3", 1).recipes[r.name]
    assert counts["graph"] == 1
    assert d.dependents and all(k[0].startswith("svc-") for k in d.dependents), d.dependents
    counts.clear()
    plan(Desired({r.name: d}, 1), Observed(tuple(allocs), ()), 0.0)
    assert counts["graph"] == 0, counts
