"""File operations on manifests/ that must never take a deployment down (issue 32, items 1, 2).

The rule tests drive ``load_manifests`` on its own clock; the e2e tests run the real
reconciler on the real local Slurm and read the cluster back.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest

from harness import Harness
from helpers import wait_until
from reconciler.drivers.local import LocalDriver
from reconciler.shell.loop import Controller
from reconciler.shell.manifests import DELETE_GRACE, load_manifests
from support.recipes import KEEP, ROUTED

GOOD = "name: r\nmodel: {path: m}\nengine: mocker\nroles: {agg: {workers: 1, gpus: 1}}\n"


def _applied(c: Controller, now: float, gone: dict) -> object:
    """One pass as the running controller makes it; what it applied is recorded."""
    m = load_manifests(c.manifests_dir, c.state, now, 0.5, None, None, gone)
    for name, text in m.texts.items():
        c.state.write_last_applied(name, text)
    c.state.write_files(m.paths)
    return m


def test_a_newcomer_with_a_running_recipes_name_never_takes_it(tmp_path):
    m = tmp_path / "manifests"
    m.mkdir()
    (m / "good.yaml").write_text(GOOD)
    os.utime(m / "good.yaml", (0, 0))
    c = Controller(m, tmp_path / "state", LocalDriver(tmp_path / "state"))
    gone: dict = {}
    first = _applied(c, 100.0, gone)
    assert first.recipes["r"].roles.agg.workers == 1
    (m / "collide.yaml").write_text(GOOD.replace("workers: 1", "workers: 3"))  # sorts before good.yaml
    os.utime(m / "collide.yaml", (0, 0))
    for _ in range(2):  # and again: the newcomer never becomes the owner
        got = _applied(c, 200.0, gone)
        assert got.recipes["r"].roles.agg.workers == 1
        assert "collide.yaml" in got.invalid["r"] and "this file is ignored" in got.invalid["r"]
        assert got.paths == {str(m / "good.yaml"): ["r"]}
    # the owner broken meanwhile: it keeps its claim on its last applied spec
    (m / "good.yaml").write_text(GOOD.replace("workers: 1", "workers: [1]"))
    os.utime(m / "good.yaml", (0, 0))
    broken = _applied(c, 300.0, gone)
    assert broken.recipes["r"].roles.agg.workers == 1
    assert str(m / "collide.yaml") not in broken.paths


def test_a_deleted_file_is_held_for_a_grace_and_a_recreated_one_is_never_a_deletion(tmp_path):
    m = tmp_path / "manifests"
    m.mkdir()
    (m / "r.yaml").write_text(GOOD)
    os.utime(m / "r.yaml", (0, 0))
    c = Controller(m, tmp_path / "state", LocalDriver(tmp_path / "state"))
    gone: dict = {}
    _applied(c, 100.0, gone)
    (m / "r.yaml").rename(m / "r.yaml~")  # an editor's save: rename, then copy back
    held = _applied(c, 200.0, gone)
    assert held.recipes["r"].roles.agg.workers == 1 and held.settling == {str(m / "r.yaml"): 200.0 + DELETE_GRACE}
    assert _applied(c, 200.0 + DELETE_GRACE / 2, gone).recipes.get("r") is not None
    shutil.copy(m / "r.yaml~", m / "r.yaml")
    os.utime(m / "r.yaml", (0, 0))
    assert _applied(c, 201.0, gone).recipes["r"].roles.agg.workers == 1
    assert gone == {}
    (m / "r.yaml").unlink()  # deleted for good: gone once the grace is over, a new grace each time
    assert "r" in _applied(c, 300.0, gone).recipes
    assert "r" not in _applied(c, 300.0 + DELETE_GRACE, gone).recipes


def _restarts(h: Harness, name: str) -> int:
    data = json.loads((h.state / name / "launches.json").read_text())
    return sum(int(r.get("restarts", 0)) for r in data.values())


@pytest.mark.slurm
@pytest.mark.parametrize("save", ["delete-then-create", "rename-then-copy"])
def test_saving_by_delete_and_recreate_tears_nothing_down(tmp_path, save):
    h = Harness(tmp_path, "slurm")
    try:
        name = h.name("save")
        f = h.manifests / f"{name}.yaml"
        f.write_text(KEEP.format(name=name))
        h.start("--allow-empty")  # the only file: its deletion is not refused as a mis-mounted directory
        h.wait_ready(name, timeout=90)
        step, job = h.steps(name)["agg_0"][0], h.jobs(name)
        before = len(h.actions(name))
        text = f.read_text()
        if save == "delete-then-create":
            f.unlink()
        else:
            f.rename(f.with_name(f.name + "~"))
        # a whole tick (the second from now) sees the file missing; without the grace it cancels
        first = h.ticks()
        wait_until(lambda: h.ticks() >= first + 2, timeout=30, what="a tick that sees the file missing")
        f.write_text(text)
        h.idle(name, ticks=5)  # a grace and a debounce later: still nothing done
        assert h.actions(name)[before:] == []
        assert h.steps(name)["agg_0"][0] == step and h.jobs(name) == job
        assert _restarts(h, name) == 0
        assert h.get(name)["status"] == "Ready"
    finally:
        h.cleanup()


@pytest.mark.slurm
def test_wiping_state_under_a_running_reconciler_fails_no_request_and_keeps_the_lock(tmp_path):
    """`rm -rf state/*` while running: the router keeps its last list until the endpoints file is
    written again, and the lock is made again so a second `run` is refused."""
    import subprocess
    import sys

    from support.clients import Client

    h = Harness(tmp_path, "slurm")
    client = None
    try:
        name = h.name("wipe")
        (h.manifests / f"{name}.yaml").write_text(ROUTED.format(name=name))
        h.start()
        endpoint = h.wait_ready(name, timeout=90)["endpoint"]
        routed = h.state / name / "endpoints.json"
        wait_until(lambda: routed.exists() and len(json.loads(routed.read_text())["workers"]) == 1,
                   what="the worker routed")
        step = h.steps(name)["agg_0"][0]
        client = Client(endpoint, limit=3000)
        client.start()
        wait_until(lambda: client.ok >= 20, what="requests before the wipe")
        for p in h.state.iterdir():
            _wipe(p)
        wait_until(lambda: (h.state / "run.lock").exists() and routed.exists(), timeout=30,
                   what="the lock and the endpoints file made again")
        n = client.ok
        wait_until(lambda: client.ok >= n + 50, timeout=60, what="requests after the wipe")
        second = subprocess.run([sys.executable, "-m", "reconciler.cli", "run", "--manifests", str(h.manifests),
                                 "--state", str(h.state), "--driver", "slurm"],
                                capture_output=True, text=True, timeout=60, cwd=tmp_path, env=h.env)
        assert second.returncode != 0 and "another reconciler" in second.stderr, second.stderr[-2000:]
        client.halt.set()
        client.join(15)
        assert client.failed == [], (client.ok, client.failed[:5])
        assert h.steps(name)["agg_0"][0] == step  # adopted, not relaunched
    finally:
        if client is not None:
            client.halt.set()
            client.join(15)
        h.cleanup()


def _wipe(p) -> None:
    """rm -rf of one entry while the reconciler writes into it: a file it writes between rmtree's
    listing and its rmdir fails the rmdir ("Directory not empty"), as it would fail `rm -rf`;
    the wipe is done again, as an operator would (bounded)."""
    for _ in range(50):
        try:
            shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
            return
        except OSError:
            if not p.exists() and not p.is_symlink():
                return  # gone (a file of it removed under rmtree is a FileNotFoundError too)
    raise AssertionError(f"{p} could not be wiped in 50 tries")
