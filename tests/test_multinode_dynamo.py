"""The real Dynamo stack (dynamo.frontend + dynamo.mocker from .stacks/dynamo) with its workers on
two nodes of the 3-node Slurm: the frontend on one node finds the workers through file discovery
on a directory every node sees, and sends them requests over the request plane between nodes."""

from __future__ import annotations


import pytest

from helpers import get, wait_until
from support.clusters import mn, ranks, workers  # noqa: F401 - fixtures among them
from support.clients import instances, served, serves
from support.stacks import host_runtime_config, stack_tools, tiny_model  # noqa: F401 - fixtures among them

pytestmark = pytest.mark.multinode

RECIPE = """\
schema: 2
name: {name}
model: {{path: "qwen3-0.6b", container: "sglang"}}
resources: {{gpus_per_node: 4, agg_nodes: 2, agg_workers: 2}}
frontend: {{type: dynamo}}
backend: {{type: mocker, engine_type: vllm, speedup_ratio: 100}}
reconcile: {{discovery: file, discovery_dir: "{shared}"}}
"""


def test_dynamo_stack_with_workers_on_two_nodes(mn, stack_tools, tiny_model, tmp_path):
    host_runtime_config(tmp_path, stack_tools, tiny_model)
    shared = tmp_path / "discovery"  # one directory, the same path on every node (one filesystem)
    name = mn.name("mndyn")
    (mn.manifests / f"{name}.yaml").write_text(RECIPE.format(name=name, shared=shared))
    mn.start()
    g = mn.wait_ready(name, timeout=120)
    placed = {u: node for (u, r), (_, node) in ranks(mn, name).items() if r == 0}
    assert set(placed) == {"agg_0", "agg_1", "frontend_0"}, placed  # no etcd, no NATS
    assert placed["agg_0"] != placed["agg_1"], placed
    assert placed["frontend_0"] in (placed["agg_0"], placed["agg_1"])
    endpoint = g["endpoint"]
    wait_until(lambda: instances(endpoint) == 2, timeout=60, what="the frontend to list both workers")
    model = wait_until(lambda: served(endpoint), timeout=30, what="the model listed")
    # enough requests that both workers serve some (Dynamo balances across instances)
    for _ in range(6):
        assert wait_until(lambda: serves(endpoint, model), timeout=30, what="a chat completion")
    assert any(shared.rglob("*")), f"file discovery wrote nothing under {shared}"
    # the worker on another node than the frontend took requests over the request plane
    rows = workers(mn, name)
    remote = next(u for u in ("agg_0", "agg_1") if placed[u] != placed["frontend_0"])
    url = f"http://{placed[remote]}:{rows[remote]['ports']['system']}"
    assert generate_requests(url) > 0, f"{remote} on {placed[remote]} got no request from the frontend"


def generate_requests(url: str) -> float:
    """Bytes of `generate` requests a Dynamo worker received (its system server's /metrics)."""
    _, body = get(url + "/metrics")
    return sum(float(l.rsplit(" ", 1)[1]) for l in body.decode().splitlines()
               if l.startswith("dynamo_component_request_bytes_total{") and 'dynamo_endpoint="generate"' in l)
