"""The built-in router's endpoints file does not drop a worker for one failed probe (issue 32,
item 9: the cause found for "a 1-worker role lost 132 of 343 requests once"). On a busy node a
/health answer can take longer than the probe's 1 s timeout; the file listed only the workers
Ready at this very probe, so a one-worker role's list went empty and every request through the
router was a fast 503 until the next pass. A worker that was Ready stays listed below the
liveness threshold (as the SGLang/vLLM routers keep it, router_sync.serving), and goes once it
is judged dead."""

from __future__ import annotations

import json

import reconciler.shell.observe as observe
from reconciler.drivers.memory import MemoryDriver
from reconciler.shell.loop import Controller

RECIPE = ("name: r\nmodel: {path: m}\nengine: mocker\nfrontend: {type: builtin}\n"
          "roles: {agg: {workers: 1, gpus: 1}}\nreconcile: {liveness_failures: 3}\n")


def test_one_failed_probe_keeps_the_only_worker_routed_and_a_dead_one_goes(tmp_path, monkeypatch):
    m = tmp_path / "manifests"
    m.mkdir()
    (m / "r.yaml").write_text(RECIPE)
    healthy = {"agg": True}
    monkeypatch.setattr(observe, "probe_units", lambda units, **kw: {
        u.key: healthy.get(u.role, True) for u in units})
    c = Controller(m, tmp_path / "state", MemoryDriver(host="node0"))
    c.debounce = 0
    routed = tmp_path / "state" / "r" / "endpoints.json"

    def names() -> list[str]:
        return [w["name"] for w in json.loads(routed.read_text())["workers"]]

    for _ in range(4):
        c.tick()
    assert names() == ["agg_0"]
    healthy["agg"] = False  # a slow /health answer
    c.tick()
    assert names() == ["agg_0"]  # was: [] — every request a 503 until the next pass
    c.tick()
    c.tick()
    assert names() == []  # three failures in a row: judged dead, no longer routed
