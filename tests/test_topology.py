"""Where workers land: allocation tables."""

from __future__ import annotations

import pytest

from reconciler.recipe.topology import RoleLayout, TopologyError, allocate


def place(gpn, spread=False, **roles):
    layouts = {m: RoleLayout(m, *spec) for m, spec in roles.items()}
    eps, n = allocate(layouts, gpn, spread)
    return {e.name: (tuple(x + 1 for x in e.nodes), e.gpus) for e in eps}, n


def test_issue_table_two_full_prefill_four_half_decode():
    # 2 x 8-GPU prefill + 4 x 4-GPU decode on 4 nodes of 8 GPUs
    got, n = place(8, prefill=(2, 2, 8), decode=(2, 4, 4))
    assert n == 4
    assert got == {
        "prefill_0": ((1,), tuple(range(8))),
        "prefill_1": ((2,), tuple(range(8))),
        "decode_0": ((3,), (0, 1, 2, 3)),
        "decode_1": ((3,), (4, 5, 6, 7)),
        "decode_2": ((4,), (0, 1, 2, 3)),
        "decode_3": ((4,), (4, 5, 6, 7)),
    }


def test_multi_node_workers_take_whole_consecutive_nodes():
    got, n = place(4, agg=(4, 2, 8))
    assert n == 4
    assert got["agg_0"] == ((1, 2), (0, 1, 2, 3))
    assert got["agg_1"] == ((3, 4), (0, 1, 2, 3))


def test_decode_colocates_on_prefill_spare_gpus():
    got, n = place(8, prefill=(1, 2, 2), decode=(0, 1, 4, True))
    assert n == 1
    assert got["prefill_0"] == ((1,), (0, 1))
    assert got["prefill_1"] == ((1,), (2, 3))
    assert got["decode_0"] == ((1,), (4, 5, 6, 7))


def test_spread_puts_one_partial_worker_per_node():
    got, _ = place(8, spread=True, agg=(3, 3, 2))
    assert [got[f"agg_{i}"][0] for i in range(3)] == [(1,), (2,), (3,)]


def test_packing_skips_to_next_node_when_worker_does_not_fit():
    got, _ = place(8, agg=(2, 3, 3))
    assert got["agg_0"] == ((1,), (0, 1, 2))
    assert got["agg_1"] == ((1,), (3, 4, 5))
    assert got["agg_2"] == ((2,), (0, 1, 2))


@pytest.mark.parametrize(
    "roles, key",
    [
        ({"agg": (1, 3, 4)}, "roles.agg.workers"),  # 12 GPUs on one 8-GPU node
        ({"agg": (2, 1, 12)}, "roles.agg.gpus"),  # not a whole number of nodes
        ({"prefill": (1, 1, 8), "decode": (0, 1, 2, True)}, "roles.decode.workers"),  # no spare GPUs
    ],
)
def test_layouts_that_do_not_fit(roles, key):
    with pytest.raises(TopologyError) as ei:
        place(8, **roles)
    assert ei.value.key == key


def test_one_node_1p4d_decode_on_gpus_1_to_4_as_srtctl():
    """srtctl core/topology.py allocate_endpoints: one cursor over the job's nodes; with no node left
    after the prefill's (decode_nodes: 0), decode shares the prefill's node from where it ended."""
    got, n = place(8, prefill=(1, 1, 1), decode=(0, 4, 1, True))
    assert n == 1
    assert got["prefill_0"] == ((1,), (0,))
    assert [got[f"decode_{i}"] for i in range(4)] == [((1,), (g,)) for g in (1, 2, 3, 4)]


def test_colocated_decode_goes_on_from_the_last_prefill_worker_not_back_into_a_gap():
    # prefill 3 x 3 GPUs on two 8-GPU nodes: node 1 GPUs 0-2, 3-5 (2 left), node 2 GPUs 0-2.
    # srtctl's cursor is on node 2 at GPU 3: decode 2 x 2 GPUs go there, not into node 1's gap
    got, n = place(8, prefill=(2, 3, 3), decode=(0, 2, 2, True))
    assert n == 2
    assert got["prefill_2"] == ((2,), (0, 1, 2))
    assert got["decode_0"] == ((2,), (3, 4))
    assert got["decode_1"] == ((2,), (5, 6))


ONE_P_FOUR_D = """\
schema: 2
name: qwen-1p4d
model: {{path: /m}}
resources: {{gpus_per_node: 8}}
engine: {{type: vllm, connector: nixl}}
frontend: {{type: dynamo}}
roles:
  prefill: {{workers: 1, gpus: {p}}}
  decode: {{workers: {w}, gpus: {d}}}
"""


@pytest.mark.parametrize("p, w, d, want", [
    # issue 33: srtctl puts decode on GPUs 1-4 of node 1; we took a second node for it
    (1, 4, 1, {"prefill_0": ((1,), (0,)), **{f"decode_{i}": ((1,), (i + 1,)) for i in range(4)}}),
    (1, 1, 4, {"prefill_0": ((1,), (0,)), "decode_0": ((1,), (1, 2, 3, 4))}),
    # does not fit on one node: srtctl stops ("Not enough nodes"), we give each role its nodes
    (4, 2, 4, {"prefill_0": ((1,), (0, 1, 2, 3)), "decode_0": ((2,), (0, 1, 2, 3)), "decode_1": ((2,), (4, 5, 6, 7))}),
])
def test_a_recipe_naming_no_node_count_is_one_node_when_it_fits_as_srtctl(p, w, d, want):
    """srtctl src/srtctl/core/schema.py: with neither prefill_nodes nor decode_nodes the job is
    ``agg_nodes or 1`` node (``is_disaggregated`` false, ``total_nodes``), and allocate_endpoints'
    one cursor puts decode after prefill on that node."""
    from reconciler.desired.admission import load_text

    recipe = load_text(ONE_P_FOUR_D.format(p=p, w=w, d=d), "r.yaml").recipe
    eps, n = allocate(recipe.role_layouts(), 8)
    assert {e.name: (tuple(x + 1 for x in e.nodes), e.gpus) for e in eps} == want
    assert n == max(x for nodes, _ in want.values() for x in nodes)


# MiniMax-M2.5 B300 vllm/disagg-1p4d-1k1k.yaml in srt-slurm, reduced to what places it (v1): one prefill
# worker of 1 GPU and one decode worker of 4, a node named for each role, and the vLLM engine's
# allow_prefill_decode_colocation
MINIMAX_1P1D = """\
name: minimax-1p1d
model: {{path: /m, container: c.sqsh, precision: fp8}}
resources:
  gpu_type: b300
  gpus_per_node: 8
  prefill_nodes: 1
  decode_nodes: 1
  prefill_workers: {pw}
  decode_workers: {dw}
  gpus_per_prefill: {p}
  gpus_per_decode: {d}
backend: {{type: vllm{knob}}}
frontend: {{type: dynamo}}
"""
COLOCATE = ", allow_prefill_decode_colocation: true"


def _placed(text: str):
    from reconciler.desired.admission import load_text
    from reconciler.desired.topology import topology

    topo = topology(load_text(text, "r.yaml").recipe)
    return {e.name: (tuple(x + 1 for x in e.nodes), e.gpus) for e in topo.endpoints}, topo.facts.nodes


@pytest.mark.parametrize("pw, dw, p, d, knob, want", [
    # the recipe: srtctl's SrtConfig.total_nodes is 1 (VLLMProtocol.should_colocate_prefill_decode: 1 + 4 GPUs
    # fit on 8) and allocate_endpoints goes on from the prefill's GPU 0 on that node
    (1, 1, 1, 4, COLOCATE, {"prefill_0": ((1,), (0,)), "decode_0": ((1,), (1, 2, 3, 4))}),
    # srtctl's own colocation table: 2P2D of 2 GPUs on one node
    (2, 2, 2, 2, COLOCATE, {"prefill_0": ((1,), (0, 1)), "prefill_1": ((1,), (2, 3)),
                            "decode_0": ((1,), (4, 5)), "decode_1": ((1,), (6, 7))}),
    # without the knob srtctl starts decode on a node of its own (allocate_endpoints' advance)
    (1, 1, 1, 4, "", {"prefill_0": ((1,), (0,)), "decode_0": ((2,), (0, 1, 2, 3))}),
    # 6 + 4 GPUs do not fit on 8: srtctl keeps the two nodes, and so do we
    (1, 1, 6, 4, COLOCATE, {"prefill_0": ((1,), tuple(range(6))), "decode_0": ((2,), (0, 1, 2, 3))}),
])
def test_vllm_prefill_decode_colocation_is_one_node_when_it_fits_as_srtctl(pw, dw, p, d, knob, want):
    got, nodes = _placed(MINIMAX_1P1D.format(pw=pw, dw=dw, p=p, d=d, knob=knob))
    assert got == want
    assert nodes == max(x for ns, _ in want.values() for x in ns)


def test_the_colocation_knob_is_read_in_schema_2_too_and_only_on_vllm():
    text = ("schema: 2\nname: m\nmodel: {{path: /m}}\nresources: {{gpus_per_node: 8}}\n"
            "engine: {{type: {engine}{knob}}}\nfrontend: {{type: builtin}}\n"
            "roles:\n  prefill: {{nodes: 1, workers: 1, gpus: 1}}\n  decode: {{nodes: 1, workers: 1, gpus: 4}}\n")
    got, nodes = _placed(text.format(engine="vllm", knob=COLOCATE))
    assert (got, nodes) == ({"prefill_0": ((1,), (0,)), "decode_0": ((1,), (1, 2, 3, 4))}, 1)
    got, nodes = _placed(text.format(engine="sglang", knob=""))
    assert (got["decode_0"], nodes) == (((2,), (0, 1, 2, 3)), 2)
