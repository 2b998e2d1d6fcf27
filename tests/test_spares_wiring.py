"""Warm spares' wiring, without processes: the autoscaler's counts carry the spares, the desired state
builds them, and neither the endpoints file nor a router's worker set gets them."""

from __future__ import annotations

import json

from fakes import FakeCluster, recipe
from reconciler.desired.build import build
from reconciler.desired.scale import Scale
from reconciler.drivers.state import StateDir
from reconciler.shell.elastic.autoscale import Autoscaler
from reconciler.shell.readiness import router_sync
from reconciler.shell.record import write_endpoints
from support.autoscale import converge

TEXT = """\
name: r
model: {path: /m}
resources: {gpus_per_node: 8}
engine: mocker
frontend: {type: builtin}
roles:
  prefill: {workers: 1, gpus: 1}
  decode: {workers: 1, gpus: 2}
reconcile:
  autoscale:
    warm: 1
    roles:
      decode: {min: 1, max: 3, target: {waiting_per_worker: 2}}
"""


def memory(tmp_path, roles: dict) -> None:
    (tmp_path / "r").mkdir(exist_ok=True)
    (tmp_path / "r" / "autoscale.json").write_text(json.dumps({"roles": roles}))


def test_the_counts_carry_the_spares_above_the_built_workers(tmp_path):
    r = recipe(TEXT)
    a = Autoscaler(StateDir(tmp_path))
    # nothing kept: the file's one worker and one spare behind it
    assert a.overrides({"r": r}, 0.0)["r"] == Scale({"decode": 2}, frozenset(), frozenset({"decode_1"}))
    memory(tmp_path, {"decode": {"built": 2, "target": 2}})  # scaled up: the next index is the spare
    assert a.overrides({"r": r}, 0.0)["r"] == Scale({"decode": 3}, frozenset(), frozenset({"decode_2"}))
    memory(tmp_path, {"decode": {"built": 3, "target": 3}})  # at max: no spare (it could never be routed)
    assert a.overrides({"r": r}, 0.0)["r"] == Scale({"decode": 3})
    # draining from 3 to 2: the victim keeps its place within max, so no spare until it is gone
    memory(tmp_path, {"decode": {"built": 3, "target": 2, "drain_since": 5.0}})
    assert a.overrides({"r": r}, 9.0)["r"] == Scale({"decode": 3}, frozenset({"decode_2"}))
    memory(tmp_path, {"decode": {"built": 1, "target": 1}})
    assert a.overrides({"r": r.model_copy(update={"reconcile": r.reconcile.model_copy(update={
        "autoscale": r.reconcile.autoscale.model_copy(update={"warm": 0})})})}, 0.0)["r"] == Scale({"decode": 1})


def test_a_spare_is_built_and_running_but_given_to_no_router(tmp_path):
    r = recipe(TEXT)
    c = FakeCluster()
    sc = {"r": Scale({"decode": 2}, frozenset(), frozenset({"decode_1"}))}
    converge(c, r, sc)
    full = build({"r": r}, c.observed(), c.ports, tmp_path, "py", 1, scale=sc)
    d = full.recipes["r"]
    o = c.observed(full)
    assert sorted(u.name for u in d.units) == ["decode_0", "decode_1", "prefill_0"]  # built, launched
    assert d.spares == frozenset({"decode_1"})
    write_endpoints(StateDir(tmp_path), d, o, 0.0)
    names = [w["name"] for w in json.loads((tmp_path / "r" / "endpoints.json").read_text())["workers"]]
    assert sorted(names) == ["decode_0", "prefill_0"]
    spare = next(u for u in d.units if u.name == "decode_1")
    assert spare.url not in router_sync.wanted(d, o, 0.0)
    # promoted (no longer a spare): the same unit, nothing relaunched, now routed
    up = build({"r": r}, c.observed(), c.ports, tmp_path, "py", 1,
               scale={"r": Scale({"decode": 3}, frozenset(), frozenset({"decode_2"}))}).recipes["r"]
    same = next(u for u in up.units if u.name == "decode_1")
    assert same.spec_hash == spare.spec_hash
    assert same.url in router_sync.wanted(up, o, 0.0)


def test_get_counts_a_ready_spare_as_no_serving_worker():
    from reconciler.cli.autoscale_view import serving_ready
    from reconciler.cli.recorded import autoscale

    last = {"target": 1, "ready": 1, "spares": [{"name": "agg_1", "ready": True}]}
    assert serving_ready(2, last) == 1  # agg_0 serves; agg_1 is Ready but out of the routers
    assert serving_ready(1, {**last, "spares": [{"name": "agg_1", "ready": False}]}) == 1
    assert serving_ready(None, last) == 1  # no Ready count now: the last look's
    got = autoscale({"last": {"agg": last}}, {"agg": {"ready": 2}})
    assert got is not None and got["agg"]["current"] == 1 and got["agg"]["spares"] == last["spares"]


def test_the_status_page_document_carries_the_spares(tmp_path):
    from types import SimpleNamespace

    from reconciler.ui import model
    from reconciler.ui.page import PAGE

    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "status.json").write_text(json.dumps({"name": "r", "phase": "Ready", "conditions": [],
                                                            "workers": [], "roles": {}}))
    last = {"at": "2026-12-07T04:00:00Z", "reason": "steady", "ready": 1, "target": 1, "built": 1, "min": 1,
            "max": 3, "draining": [], "spares": [{"name": "agg_1", "ready": True}]}
    (tmp_path / "r" / "autoscale.json").write_text(json.dumps({"roles": {}, "last": {"agg": last}, "decisions": []}))
    ctl = SimpleNamespace(state=StateDir(tmp_path), ticks=1, actions_done=0, tick_failures=0)
    agg = model.build(ctl, ["r"], {})["autoscaler"]["deployments"]["r"]["agg"]
    assert agg["spares"] == [{"name": "agg_1", "ready": True}]
    assert "v.spares" in PAGE and "+ warm" in PAGE  # the page draws them beside DESIRED
