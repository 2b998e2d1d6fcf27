"""shell/cluster_config.py on real files: a rewritten srtslurm.yaml is put in force, an invalid one
refused with its located error while the one in force is kept (issue 46 item 5)."""

from __future__ import annotations

import json
import os

from reconciler.drivers.state import StateDir
from reconciler.recipe import cluster
from reconciler.shell.cluster_config import ClusterConfigWatch, line, recorded


def kinds(state: StateDir) -> list[str]:
    p = state.root / "events.jsonl"
    return [json.loads(l)["kind"] for l in p.read_text().splitlines()] if p.exists() else []


def test_a_file_written_after_start_is_put_in_force_and_a_bad_rewrite_refused(tmp_path, monkeypatch):
    monkeypatch.delenv(cluster.ENV_VAR, raising=False)
    here = tmp_path / "a" / "b" / "c"
    here.mkdir(parents=True)
    state = StateDir(tmp_path / "state")
    w = ClusterConfigWatch(state, None, cwd=here)
    changes = []
    w.on_change = lambda c, v: changes.append(v.sha256)
    assert w.refresh() is None and recorded(state.root)["path"] is None and kinds(state) == []

    cfg = here / "srtslurm.yaml"
    cfg.write_text("default_partition: debug\n")  # the README's order: written while run runs
    c = w.refresh()
    assert c is not None and c.config.default_partition == "debug"
    rec = recorded(state.root)
    assert rec["path"] == str(cfg) and len(rec["sha256"]) == 12 and rec["error"] is None
    assert kinds(state) == ["ClusterConfigLoaded"] and changes == [rec["sha256"]]
    assert w.refresh() is c  # unchanged: not loaded again, nothing said

    cfg.write_text("default_partition: debug\nno_such_key: 1\n")
    assert w.refresh() is c  # refused: the one in force is kept
    bad = json.loads((state.root / "events.jsonl").read_text().splitlines()[-1])
    assert bad["kind"] == "ClusterConfigInvalid" and bad["path"] == str(cfg)
    assert bad["message"].startswith(f"{cfg}: no_such_key: unknown key")
    assert f"kept in force: {cfg} (sha256 {rec['sha256']}" in bad["message"]
    rec2 = recorded(state.root)
    assert rec2["sha256"] == rec["sha256"] and "no_such_key" in rec2["error"]
    assert "a rewrite was refused: " in line(rec2)

    cfg.write_text("default_partition: [unclosed\n")
    assert w.refresh() is c
    assert recorded(state.root)["error"].startswith(f"{cfg}:2: YAML syntax error")  # at its line (the stream's end)

    cfg.write_text("default_partition: other\n")
    c2 = w.refresh()
    assert c2 is not c and c2.config.default_partition == "other" and recorded(state.root)["error"] is None
    assert len(changes) == 2

    os.utime(cfg)  # touched, same text: nothing to put in force
    cfg.write_text("default_partition: other\n")
    assert w.refresh() is c2 and len(changes) == 2

    cfg.unlink()  # gone: kept (a save by delete-then-create must not change every spec), and said
    assert w.refresh() is c2
    assert kinds(state)[-1] == "ClusterConfigMissing"
