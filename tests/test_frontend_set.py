"""srtctl's multiple frontends: how many, where, and what a render shows (pure)."""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.desired.frontend_set import frontend_count, frontend_nodes
from reconciler.desired.admission import load_text
from reconciler.desired.render import render_units


def _recipe(frontend: str, nodes: int = 1):
    text = f"""\
schema: 2
name: fe
model: {{path: m}}
resources: {{gpus_per_node: 8}}
engine: {{type: mocker}}
roles: {{agg: {{workers: {nodes}, gpus: 8}}}}
frontend: {frontend}
"""
    return load_text(text, "fe.yaml").recipe


@pytest.mark.parametrize("frontend, count", [
    ("{type: dynamo}", 10),  # srtctl's defaults: enabled, 9 additional
    ("{type: sglang-router}", 10),
    ("{type: vllm-router}", 10),
    ("{type: dynamo, enable_multiple_frontends: false}", 1),
    ("{type: dynamo, num_additional_frontends: 0}", 1),
    ("{type: dynamo, num_additional_frontends: 3}", 4),
    ("{type: builtin}", 1),  # the project's own router: one unless asked
    ("{type: builtin, enable_multiple_frontends: true}", 10),
    ("{type: builtin, num_additional_frontends: 1}", 2),
    ("{type: builtin, enable_multiple_frontends: false, num_additional_frontends: 4}", 1),
    ("{type: sglang}", 1),  # direct: the engine is the frontend
])
def test_count(frontend, count):
    assert frontend_count(_recipe(frontend)) == count


def test_placement_is_srtctls():
    # srtctl's _compute_frontend_topology: one per node off the head, at most the count
    assert frontend_nodes(1, ["a", "b", "c"], "a") == ["a"]
    assert frontend_nodes(10, ["a", "b", "c"], "a") == ["b", "c"]  # srtctl's default on 3 nodes: 2
    assert frontend_nodes(1, ["a", "b", "c"], "a") == ["a"]  # disabled: the head
    assert frontend_nodes(10, ["a"], "a") == ["a"]  # one node: one frontend, on the head
    assert frontend_nodes(2, ["a", "b", "c", "d"], "a") == ["b", "c"]
    # several enabled with 0 additional: srtctl still runs nginx on the head, its one frontend off it
    assert frontend_nodes(1, ["a", "b", "c"], "a", enabled=True) == ["b"]
    assert frontend_nodes(1, ["a", "b", "c"], "a", enabled=False) == ["a"]


def test_the_builtin_router_runs_the_count_it_asks_for():
    assert frontend_nodes(4, ["a", "b", "c"], "a", own=True) == ["b", "c", "b", "c"]  # round-robin
    assert frontend_nodes(3, ["a"], "a", own=True) == ["a", "a", "a"]  # one node: all on the head


def test_render_of_srtctls_default_on_a_one_node_job_is_one_frontend(tmp_path: Path):
    fes = [u for u in render_units(_recipe("{type: sglang-router}"), None, tmp_path) if u.role == "frontend"]
    assert [(u.index, u.nodes[0]) for u in fes] == [(0, "node1")]


def test_render_of_srtctls_default_on_three_nodes_is_one_per_other_node(tmp_path: Path):
    fes = [u for u in render_units(_recipe("{type: sglang-router}", nodes=3), None, tmp_path) if u.role == "frontend"]
    assert [(u.index, u.nodes[0]) for u in fes] == [(0, "node2"), (1, "node3")]


def test_render_places_each_frontend_as_its_own_unit(tmp_path: Path):
    fes = [u for u in render_units(_recipe("{type: builtin, num_additional_frontends: 2}", nodes=3), None, tmp_path)
           if u.role == "frontend"]
    assert [(u.index, u.nodes[0]) for u in fes] == [(0, "node2"), (1, "node3"), (2, "node2")]
    assert fes[0].ports["http"] != fes[2].ports["http"]  # two on one node: two ports


def test_bad_count_refused_at_its_key():
    with pytest.raises(Exception, match="num_additional_frontends"):
        _recipe("{type: dynamo, num_additional_frontends: -1}")
