"""Two Dynamo frontends behind the gateway (issue 27: "a frontend step killed, 2 frontends: 0
failed"). srtctl runs several frontends only on a job of 2+ nodes, one on each node other than
the head; so the recipe (srtctl's dynamo-agg shape, workers spread over the 3-node Slurm) asks
for one additional frontend and gets frontend_0 and frontend_1 on two nodes. A client loop
through the gateway (on this host, the login node) sends chat completions while one frontend's
step is killed: nginx passes every request that frontend refused or dropped to the other."""

from __future__ import annotations

import time

import pytest

from benchmarks.traffic import Traffic
from harness import scancel
from helpers import wait_until
from reconciler.shell.gateway.record import facts
from support.clusters import mn, ranks  # noqa: F401 - fixtures among them
from support.stacks import host_runtime_config, stack_tools, tiny_model  # noqa: F401 - fixtures among them
from support.clients import served

pytestmark = [pytest.mark.multinode,
              pytest.mark.needs("nginx")]

RECIPE = """\
schema: 2
name: {name}
model: {{path: "qwen3-0.6b", container: "sglang"}}
resources: {{gpus_per_node: 4, agg_nodes: 3, agg_workers: 3}}
frontend: {{type: dynamo, enable_multiple_frontends: true, num_additional_frontends: 1}}
backend: {{type: mocker, engine_type: vllm, speedup_ratio: 100}}
reconcile: {{discovery: file, discovery_dir: "{shared}"}}
"""


def test_two_dynamo_frontends_one_killed_no_request_fails(mn, stack_tools, tiny_model, tmp_path):
    host_runtime_config(tmp_path, stack_tools, tiny_model)
    shared = tmp_path / "discovery"
    name = mn.name("mnfe")
    (mn.manifests / f"{name}.yaml").write_text(RECIPE.format(name=name, shared=shared))
    mn.start()
    g = mn.wait_ready(name, timeout=150)
    placed = {u: node for (u, r), (_, node) in ranks(mn, name).items() if r == 0}
    head = placed["agg_0"]
    assert {"frontend_0", "frontend_1"} <= set(placed), placed
    assert head not in (placed["frontend_0"], placed["frontend_1"]) and placed["frontend_0"] != placed["frontend_1"], placed
    endpoint = g["endpoint"]
    wait_until(lambda: len(facts(mn.state, name)["upstreams"]) == 2, timeout=60, what="both frontends behind the gateway")
    model = wait_until(lambda: served(endpoint), timeout=60, what="the model listed through the gateway")
    traffic = Traffic(endpoint, model=model).start()
    try:
        assert traffic.wait_ok(time.monotonic(), 30), traffic.failed()[-3:]
        before = mn.steps(name)["frontend_0"]
        killed = time.monotonic()
        scancel(before[0])
        wait_until(lambda: mn.steps(name).get("frontend_0", before) != before, timeout=60, what="frontend_0 relaunched")
        n = len(traffic.outcomes)
        wait_until(lambda: sum(o.ok for o in traffic.outcomes[n:]) >= 50, timeout=60, what="served after it")
    finally:
        traffic.stop()
    after = [o for o in traffic.outcomes if o.at >= killed]
    failed = [o for o in after if not o.ok]
    print(f"\n2 Dynamo frontends, one killed: {len(after)} sent, {len(failed)} failed, "
          f"longest gap {traffic.longest_gap(killed, time.monotonic()):.2f}s")
    assert failed == [], failed[:5]
