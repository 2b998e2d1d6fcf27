"""NodePortAllocator: unique per node across recipes, stable, released, persisted."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

import pytest

from reconciler.core.ports import NodePortAllocator, PortsExhausted
from reconciler.desired.admission import load_text
from reconciler.desired.runtime import runtime_for
from reconciler.desired.sources.workers import worker_units
from reconciler.backends.registry import endpoints_of

RECIPE = """\
name: {name}
model: {{path: /m}}
resources: {{gpus_per_node: 8}}
engine: {engine}
frontend: {{type: {frontend}}}
roles:
  prefill: {{nodes: 1, workers: {p}, gpus: 1}}
  decode: {{nodes: colocate, workers: {d}, gpus: 1}}
"""


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["sglang", "vllm", "mocker", "trtllm"]),
            st.sampled_from(["builtin", "dynamo", "sglang-router"]),
            st.integers(1, 3),
            st.integers(1, 3),
            st.lists(st.sampled_from(["n1", "n2", "n3"]), min_size=1, max_size=1),
        ),
        min_size=1,
        max_size=6,
    )
)
def test_ports_unique_per_node_across_recipes(specs):
    ports = NodePortAllocator()
    seen: dict[tuple[str, int], str] = {}
    for i, (engine, frontend, p, d, nodes) in enumerate(specs):
        recipe = load_text(RECIPE.format(name=f"r{i}", engine=engine, frontend=frontend, p=p, d=d), f"r{i}.yaml").recipe
        units = worker_units(recipe, endpoints_of(recipe), {0: nodes[0]}, ports, runtime_for(recipe, "/s"))
        for u in units:
            for name, port in u.ports.items():
                key = (u.nodes[0], port)
                owner = f"{u.recipe}/{u.name}#{name}"
                assert seen.setdefault(key, owner) == owner, f"{key} used by {seen[key]} and {owner}"


def test_same_owner_same_port_and_release():
    a = NodePortAllocator()
    p1 = a.allocate("n1", "r/agg_0", "http")
    p2 = a.allocate("n1", "r/agg_1", "http")
    assert p1 != p2
    assert a.allocate("n1", "r/agg_0", "http") == p1  # stable across relaunches
    assert a.allocate("n2", "r/agg_0", "http") == p1  # other node, independent space
    a.release("r/agg_0")
    assert a.lookup("n1", "r/agg_0", "http") is None
    assert a.lookup("n1", "r/agg_1", "http") == p2
    a.release("r/")
    assert a.owners() == set()


def test_registry_roundtrip(tmp_path):
    a = NodePortAllocator()
    p = a.allocate("n1", "r/agg_0", "http")
    a.save(tmp_path / "ports.json")
    b = NodePortAllocator.load(tmp_path / "ports.json")
    assert b.lookup("n1", "r/agg_0", "http") == p
    assert b.allocate("n1", "other/agg_0", "http") != p
    (tmp_path / "bad.json").write_text("{not json")
    assert NodePortAllocator.load(tmp_path / "bad.json").owners() == set()


def test_claim_records_existing_ports_and_refuses_conflicts():
    a = NodePortAllocator()
    assert a.claim("n1", "r/agg_0", "http", 20007)
    assert a.lookup("n1", "r/agg_0", "http") == 20007
    assert not a.claim("n1", "r/agg_1", "http", 20007)
    assert a.allocate("n1", "r/agg_1", "http") != 20007


def test_a_block_is_consecutive_kept_across_asks_and_released_with_its_owner():
    a = NodePortAllocator(20000, 20020)
    a.allocate("n", "r/x", "http")  # 20000
    a.block("n", 20003, until=10**12)  # something foreign holds it
    base = a.allocate_block("n", "r/agg_0", "nixl", 4)
    assert base == 20004  # 20001..20004 would cross the blocked port
    assert [a.lookup("n", "r/agg_0", n) for n in ("nixl", "nixl+1", "nixl+2", "nixl+3")] == [20004, 20005, 20006, 20007]
    assert a.allocate_block("n", "r/agg_0", "nixl", 4) == base  # the same owner asks again: the same block
    assert a.allocate("n", "r/y", "http") not in range(base, base + 4)
    a.release("r/agg_0")
    assert not any(a.lookup("n", "r/agg_0", n) for n in ("nixl", "nixl+1"))
    with pytest.raises(PortsExhausted):
        a.allocate_block("n", "r/big", "nixl", 30)


def test_a_block_whose_base_alone_was_relearnt_keeps_its_place():
    a = NodePortAllocator(20000, 20100)
    base = a.allocate_block("n", "r/agg_0", "nixl", 4)
    fresh = NodePortAllocator(20000, 20100)  # ports.json lost: status only knows the base
    assert fresh.claim("n", "r/agg_0", "nixl", base)
    assert fresh.allocate_block("n", "r/agg_0", "nixl", 4) == base
    assert fresh.allocate("n", "x/agg_0", "http") not in range(base, base + 4)


OPS = st.lists(st.tuples(st.sampled_from(["allocate", "block", "claim", "release", "release_recipe", "release_key",
                                          "release_node_owner", "copy", "roundtrip"]),
                         st.sampled_from(["r1", "r2", "r1@ns"]), st.sampled_from(["n1", "n2"]),
                         st.integers(0, 3), st.integers(1, 4)), max_size=40)


@settings(max_examples=60, deadline=None)
@given(OPS)
def test_a_recipes_ports_by_its_index_are_what_a_scan_of_every_port_finds(ops):
    """``owned_by_recipe``, ``owned_index`` and ``owners(recipe)`` read a per-recipe index (one recipe's
    ports without a scan of all): after any sequence of changes they say what a scan of the registry says."""
    ports = NodePortAllocator(20000, 20040)
    for op, recipe, node, unit, size in ops:
        owner = f"{recipe}/agg_{unit}"
        try:
            if op == "allocate":
                ports.allocate(node, owner, "http")
            elif op == "block":
                ports.allocate_block(node, owner, "dist", size)
            elif op == "claim":
                ports.claim(node, owner, "http", 20000 + unit * 7 + size)
            elif op == "release":
                ports.release(owner)
            elif op == "release_recipe":
                ports.release(f"{recipe}/")
            elif op == "release_key":
                ports.release_key(node, owner, "http")
            elif op == "release_node_owner":
                ports.release_node_owner(node, owner)
            elif op == "copy":
                ports = ports.copy()
            else:
                ports = NodePortAllocator.from_dict(ports.to_dict())
        except PortsExhausted:
            pass
        scan = {r: tuple(sorted((n, k, p) for n, keys in ports.to_dict()["nodes"].items() for k, p in keys.items()
                                if k.startswith(f"{r}/"))) for r in ("r1", "r2", "r1@ns")}
        for r, want in scan.items():
            assert ports.owned_by_recipe(r) == want
            assert ports.owners(r) == {k.split("#")[0] for _, k, _ in want}
        assert ports.owned_index() == {r: v for r, v in scan.items() if v}
