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


def test_one_failed_probe_of_a_surging_workers_old_life_keeps_it_routed(tmp_path, monkeypatch):
    """The same for the old life of a surging worker (issue 32 item 9, what was left): while the
    new life is not Ready the old one is the role's only worker, and one slow /health answer of it
    emptied the endpoints file. It stays below the liveness threshold, and goes once judged dead."""
    m = tmp_path / "manifests"
    m.mkdir()
    (m / "r.yaml").write_text(RECIPE)
    answers = {0: True, 1: False}  # life slot -> its probe: the new life (slot 1) is still starting
    monkeypatch.setattr(observe, "probe_units", lambda units, **kw: {
        u.key: answers[u.slot] for u in units if u.role == "agg"} | {
        u.key: True for u in units if u.role != "agg"})
    c = Controller(m, tmp_path / "state", MemoryDriver(host="node0"))
    c.debounce = 0
    routed = tmp_path / "state" / "r" / "endpoints.json"

    def names() -> list[str]:
        return [w["name"] for w in json.loads(routed.read_text())["workers"]]

    answers[0] = True
    for _ in range(4):
        c.tick()
    assert names() == ["agg_0"]
    (m / "r.yaml").write_text(RECIPE.replace("engine: mocker", "engine: {type: mocker, speedup_ratio: 7}"))
    for _ in range(3):
        c.tick()
    (old,) = c.snapshot().desired.recipes["r"].previous.values()
    assert names() == [old.life]  # surging: the old life serves alone
    answers[old.slot] = False  # a slow /health answer of the old life
    c.tick()
    assert names() == [old.life]  # was: [] — every request a 503 until the next pass
    c.tick()
    c.tick()
    assert names() == []  # three failures in a row: judged dead, no longer routed
