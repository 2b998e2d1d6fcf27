"""What the prune guard keeps is shown, not hidden (issue 46, item 3): built from its last applied
spec, probed, and listed with its units, endpoint and served model and a warning; `reconciler prune`'s
confirmation is read back. In-memory cluster (tests/fakes.py), a real state directory in tmp_path."""

from __future__ import annotations

import json

import fakes
from fakes import FakeCluster, recipe
from reconciler.cli import deployments, recorded
from reconciler.core.plan import RecipeState, plan
from reconciler.drivers.state import StateDir
from reconciler.shell import prune_guard
from reconciler.shell.status import build_status

TEXT = """\
name: r
model: {path: "Qwen/Qwen3-0.6B"}
resources: {gpus_per_node: 8}
engine: {type: mocker}
roles: {agg: {workers: 2, gpus: 1}}
frontend: {type: builtin}
"""


def _deployed(tmp_path, monkeypatch) -> tuple[FakeCluster, StateDir]:
    """Converged on the state directory the kept build reads (paths in argv: the same spec hashes)."""
    monkeypatch.setattr(fakes, "STATE", tmp_path / "state")
    c = FakeCluster()
    c.converge({"r": recipe(TEXT)})
    state = StateDir(tmp_path / "state")
    state.write_last_applied("r", TEXT)
    return c, state


def test_every_file_gone_keeps_the_deployment_built_from_its_last_applied_spec(tmp_path, monkeypatch):
    c, state = _deployed(tmp_path, monkeypatch)
    gone = c.desired({}, manifests_seen=0)  # every manifest vanished: nothing desired
    d = prune_guard.hold(gone, c.observed(), state, c.ports, "py", None, 0.0)
    kept = d.kept["r"]
    assert {u.name for u in kept.all_units} == {"agg_0", "agg_1", "frontend_0"}
    assert kept.served_model == "Qwen/Qwen3-0.6B" and not d.recipes  # never converged
    p = plan(d, c.observed(), 0.0)
    assert p.recipes["r"].state is RecipeState.PRUNE_REFUSED and not p.actions
    # the probes see it: its units are Ready through the same observation as any recipe's
    o = c.observed(prune_guard.probed(d))
    st = build_status("r", kept, o, None, None, {}, {}, 0.0)
    prune_guard.mark(st, {}, prune_guard.why("r", {}), 0.0)
    assert st["phase"] == "ManifestMissing" and st["reason"] == "ManifestMissing"
    assert st["roles"]["agg"]["ready"] == 2 and st["roles"]["agg"]["desired"] == 2
    assert st["endpoint"] and st["servedModel"] == "Qwen/Qwen3-0.6B"
    assert [(w["name"], w["phase"]) for w in st["workers"]] == [("agg_0", "Ready"), ("agg_1", "Ready"), ("frontend_0", "Ready")]
    conds = {c["type"]: c for c in st["conditions"]}
    assert conds["Invalid"]["status"] == "True" and conds["Invalid"]["reason"] == "ManifestMissing"
    assert "validates" not in conds["Invalid"]["message"] and "reconciler prune r" in conds["Invalid"]["message"]
    assert conds["Ready"]["status"] == "True" and conds["Progressing"]["status"] == "False"
    assert st["warning"]["reason"] == "ManifestMissing"


def test_a_confirmed_prune_is_no_longer_kept_and_a_file_that_stays_keeps_nothing(tmp_path, monkeypatch):
    c, state = _deployed(tmp_path, monkeypatch)
    prune_guard.confirm(state, "r", ["cancel step 100.0"])
    d = prune_guard.hold(c.desired({}, manifests_seen=0), c.observed(), state, c.ports, "py", None, 0.0)
    assert d.prune_confirmed == {"r"} and not d.kept
    assert plan(d, c.observed(), 0.0).recipes["r"].state is RecipeState.TEARDOWN
    assert prune_guard.clear(state, "r") and not prune_guard.confirmed(state, {"r"})
    # another file still there: a deletion, not the guard's (nothing kept, nothing built)
    d = prune_guard.hold(c.desired({}, manifests_seen=1), c.observed(), state, c.ports, "py", None, 0.0)
    assert not d.kept


def test_get_lists_a_kept_deployment_from_the_record_with_its_warning(tmp_path, monkeypatch, capsys):
    c, state = _deployed(tmp_path, monkeypatch)
    d = prune_guard.hold(c.desired({}, manifests_seen=0), c.observed(), state, c.ports, "py", None, 0.0)
    st = build_status("r", d.kept["r"], c.observed(prune_guard.probed(d)), None, None, {}, {}, 0.0)
    prune_guard.mark(st, {}, prune_guard.why("r", {}), 0.0)
    state.write_status("r", st)
    (state.root / "files.json").write_text("{}")  # no file declares it any more
    (row,) = recorded.rows(state.root, (), "manifests", now=0.0)
    assert row["status"] == "ManifestMissing" and row["reason"] == "ManifestMissing" and row["error"] is None
    assert row["roles"]["agg"]["ready"] == 2 and row["endpoint"] == st["endpoint"]
    assert row["servedModel"] == "Qwen/Qwen3-0.6B" and row["warning"]["reason"] == "ManifestMissing"
    deployments.print_table([row], "manifests")
    out, err = capsys.readouterr()
    assert "agg:2/2" in out and st["endpoint"] in out and "ManifestMissing" in out
    assert "warning: r: its manifest" in err and "invalid:" not in err
    assert json.loads((state.root / "r" / "status.json").read_text())["warning"]["message"] in err
