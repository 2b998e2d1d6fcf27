"""End to end on a real 3-node Slurm (scripts/slurm-multinode.sh up --nodes 3): each node its own
network namespace, hostname and address, so ranks, ports and HTTP between nodes are real.

Every check reads the cluster itself: squeue/scontrol through the cluster's SLURM_CONF, the
workers' own HTTP and metrics over the bridge.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness import scancel, sh
from helpers import metric, post, wait_until
from reconciler import hostlist
from support.clusters import mn, ranks, workers  # noqa: F401 - fixtures among them

pytestmark = pytest.mark.multinode
ROOT = Path(__file__).resolve().parents[1]

SPAN = """\
schema: 2
name: {name}
model: {{path: m}}
resources: {{gpus_per_node: 2}}
engine: {{type: mocker, speedup_ratio: 100}}
roles:
  agg: {{nodes: 4, workers: 2, gpus: 4, restart: {{backoff_seconds: 0.5}}}}
frontend: {{type: builtin}}
reconcile: {{nodes_per_allocation: 2}}
"""


def unit_steps(r: dict, unit: str) -> dict[int, str]:
    return {rank: sid for (u, rank), (sid, _) in r.items() if u == unit}


def test_two_node_workers_place_ranks_on_distinct_nodes_and_restart_as_a_unit(mn):
    name = mn.name("mnspan")
    (mn.manifests / f"{name}.yaml").write_text(SPAN.format(name=name))
    mn.start()
    want = {("agg_0", 0), ("agg_0", 1), ("agg_1", 0), ("agg_1", 1), ("frontend_0", 0)}
    wait_until(lambda: set(ranks(mn, name)) == want, timeout=90, what=f"steps {sorted(want)}")
    g = mn.wait_ready(name, timeout=90)
    before = ranks(mn, name)
    for unit in ("agg_0", "agg_1"):
        nodes = {before[(unit, r)][1] for r in (0, 1)}
        assert len(nodes) == 2 and all(n.startswith("rnode") for n in nodes), f"{unit} on two nodes: {before}"
    r = post(f"{g['endpoint']}/v1/completions", {"model": "m", "prompt": "hi", "max_tokens": 4})
    assert r[0] == 200, r
    ports = {w: row["ports"] for w, row in workers(mn, name).items()}

    old = unit_steps(before, "agg_0")
    # one rank's step is cancelled; its sibling must not be left running alone for long, and the
    # relaunch must never pair a new rank with an old one
    scancel(old[1])
    mixed: list[dict] = []

    def relaunched():
        now = unit_steps(ranks(mn, name), "agg_0")
        if any(sid in old.values() for sid in now.values()) and any(sid not in old.values() for sid in now.values()):
            mixed.append(now)
        return len(now) == 2 and not set(now.values()) & set(old.values()) and now

    new = wait_until(relaunched, timeout=60, what=f"agg_0 relaunched (log:\n{mn.log()[-3000:]})")
    assert mixed == [], f"old and new ranks of agg_0 alive together: {mixed}"
    after = ranks(mn, name)
    # as a unit on the same nodes; the other worker and the router untouched
    assert {r: after[("agg_0", r)][1] for r in (0, 1)} == {r: before[("agg_0", r)][1] for r in (0, 1)}
    for key in [k for k in before if k[0] != "agg_0"]:
        assert after[key] == before[key], (before, after)
    g2 = mn.wait_ready(name, timeout=60)
    assert {w: row["ports"] for w, row in workers(mn, name).items()} == ports
    assert set(unit_steps(ranks(mn, name), "agg_0").values()) == set(new.values())
    assert post(f"{g2['endpoint']}/v1/completions", {"model": "m", "prompt": "hi", "max_tokens": 4})[0] == 200
    assert workers(mn, name)["agg_0"]["restarts"] == 1 and workers(mn, name)["agg_1"]["restarts"] == 0


SHARE = """\
schema: 2
name: {name}
model: {{path: m}}
resources: {{gpus_per_node: 1}}
engine: {{type: mocker, speedup_ratio: 100}}
roles:
  agg: {{nodes: 2, workers: 2, gpus: 1}}
frontend: {{type: builtin}}
"""


def gpu_bookings() -> dict[tuple[str, int], list[str]]:
    """(node, GPU index) -> the jobs Slurm gave it to, read from `scontrol show job -d`."""
    out: dict[tuple[str, int], list[str]] = {}
    job = ""
    for tok in sh("scontrol", "show", "job", "-d").split():
        if tok.startswith("JobId="):
            job = tok.split("=", 1)[1]
        elif tok.startswith("Nodes="):
            nodes = hostlist.expand(tok.split("=", 1)[1])
        elif tok.startswith("GRES=") and "IDX:" in tok:
            idx = tok.split("IDX:", 1)[1].rstrip(")")
            for part in idx.split(","):
                lo, _, hi = part.partition("-")
                for i in range(int(lo), int(hi or lo) + 1):
                    for n in nodes:
                        out.setdefault((n, i), []).append(job)
    return out


def test_three_recipes_share_nodes_with_unique_ports_and_gpus_and_route_across_nodes(mn):
    names = [mn.name(f"mnshare{i}") for i in range(3)]
    for n in names:
        (mn.manifests / f"{n}.yaml").write_text(SHARE.format(name=n))
    mn.start()
    # 3 allocations of 2 nodes each on 3 nodes: recipes must share nodes (and their GPUs)
    ready = {n: mn.wait_ready(n, timeout=60) for n in names}
    rows = {n: workers(mn, n) for n in names}
    steps = {n: ranks(mn, n) for n in names}

    by_node: dict[str, list[tuple[str, str, int]]] = {}
    for n in names:
        for (unit, _rank), (_sid, node) in steps[n].items():
            for port in rows[n][unit]["ports"].values():
                by_node.setdefault(node, []).append((n, unit, port))
    shared = [node for node, us in by_node.items() if len({r for r, _, _ in us}) > 1]
    assert shared, f"the recipes should share nodes: {by_node}"
    for node, us in by_node.items():
        ports = [p for _, _, p in us]
        assert len(ports) == len(set(ports)), f"a port used twice on {node}: {us}"

    booked = gpu_bookings()
    ours = {j for n in names for j in mn.jobs(n)}
    assert len(ours) == 3
    assert {j for js in booked.values() for j in js} >= ours
    twice = {k: js for k, js in booked.items() if len(js) > 1}
    assert twice == {}, f"GPUs given to two jobs: {twice}"
    assert len([k for k, js in booked.items() if set(js) & ours]) == 6

    for n in names:
        front = steps[n][("frontend_0", 0)][1]
        other = [u for (u, r), (_, node) in steps[n].items() if u.startswith("agg") and node != front]
        assert other, f"{n}: a worker on another node than its router: {steps[n]}"
        # every worker takes requests through the router: the one on the other node included
        for _ in range(8):
            r = post(f"{ready[n]['endpoint']}/v1/completions", {"model": "m", "prompt": "hi", "max_tokens": 2})
            assert r[0] == 200, r
        for u in other:
            url = rows[n][u]["url"]
            assert metric(url, "vllm:generation_tokens_total") >= 1, f"{n}/{u} at {url} got no request through the router"
