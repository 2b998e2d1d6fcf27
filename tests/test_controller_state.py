"""Controller bookkeeping that needs no cluster: state/ recovery and manifest handling."""

from __future__ import annotations

import json
import os

from reconciler.shell.loop import Controller
from reconciler.drivers.local import LocalDriver


def test_deleted_port_registry_is_relearnt_from_status(tmp_path):
    st = tmp_path / "state" / "r"
    st.mkdir(parents=True)
    (st / "status.json").write_text(json.dumps({"workers": [
        {"name": "agg_0", "nodes": ["n1"], "ports": {"http": 20042}},
        {"name": "agg_1", "nodes": ["n1"], "ports": {"http": 20043}},
    ]}))
    c = Controller(tmp_path / "manifests", tmp_path / "state", LocalDriver(tmp_path / "state"))
    assert c.ports.lookup("n1", "r/agg_0", "http") == 20042
    assert c.ports.allocate("n1", "r/agg_2", "http") not in (20042, 20043)


def test_invalid_file_keeps_last_applied_spec_and_duplicate_names_are_reported(tmp_path):
    m = tmp_path / "manifests"
    m.mkdir()
    good = "name: r\nmodel: {path: m}\nengine: mocker\nroles: {agg: {workers: 2, gpus: 1}}\n"
    (m / "r.yaml").write_text(good)
    c = Controller(m, tmp_path / "state", LocalDriver(tmp_path / "state"))
    first = c.load_manifests()
    c.state.write_last_applied("r", first.texts["r"])
    c.state.write_files(first.paths)
    (m / "r.yaml").write_text(good.replace("workers: 2", "workers: [2]"))
    again = c.load_manifests()
    assert again.recipes["r"].roles.agg.workers == 2  # the last good spec keeps running
    assert "roles.agg.workers" in again.invalid["r"]
    (m / "r.yaml").write_text(good)
    (m / "s.yaml").write_text(good.replace("workers: 2", "workers: 5"))  # same name: r
    dup = c.load_manifests()
    assert dup.recipes["r"].roles.agg.workers == 2  # the first file wins, the second is reported
    assert "also used by" in dup.invalid["r"]
    assert dup.files_seen == 2



def test_a_manifests_dir_holding_only_its_readme_is_empty(tmp_path):
    """The repository's manifests/ ships a README.md: it is no recipe, so nothing is invalid and the
    prune guard sees no file (deleting the last recipe beside it is still refused)."""
    from conftest import ROOT

    m = tmp_path / "manifests"
    m.mkdir()
    (m / "README.md").write_text((ROOT / "manifests" / "README.md").read_text())
    c = Controller(m, tmp_path / "state", LocalDriver(tmp_path / "state"))
    got = c.load_manifests()
    assert got.files_seen == 0 and not got.recipes and not got.invalid and not got.skipped


SWEEP = """\
name: sw
model: {path: m}
engine: mocker
roles: {agg: {workers: '{w}', gpus: 1}}
sweep: {w: %s}
"""


def test_a_sweep_file_is_one_recipe_per_combination_and_its_edits_converge_the_set(tmp_path):
    m = tmp_path / "manifests"
    m.mkdir()
    (m / "sw.yaml").write_text(SWEEP % "[1, 2]")
    c = Controller(m, tmp_path / "state", LocalDriver(tmp_path / "state"))

    def apply():
        got = c.load_manifests()
        for name, text in got.texts.items():
            c.state.write_last_applied(name, text)
        c.state.write_files(got.paths)
        return got

    first = apply()
    assert {n: r.roles.agg.workers for n, r in first.recipes.items()} == {"sw_w1": 1, "sw_w2": 2}
    assert first.paths == {str(m / "sw.yaml"): ["sw_w1", "sw_w2"]}
    # a broken edit keeps every deployment of the file on its last spec, each reported
    (m / "sw.yaml").write_text(SWEEP % "[1, 2], extra: 1")
    broken = c.load_manifests()
    assert {n: r.roles.agg.workers for n, r in broken.recipes.items()} == {"sw_w1": 1, "sw_w2": 2}
    assert set(broken.invalid) == {"sw_w1", "sw_w2"} and "sweep.extra" in broken.invalid["sw_w1"]
    # a combination removed from the sweep is no longer desired (so it is torn down); one added appears
    (m / "sw.yaml").write_text(SWEEP % "[2, 3]")
    edited = apply()
    assert sorted(edited.recipes) == ["sw_w2", "sw_w3"] and not edited.invalid
    assert c.state.files() == {str(m / "sw.yaml"): ["sw_w2", "sw_w3"]}


def test_files_json_of_an_earlier_version_still_reads(tmp_path):
    from reconciler.drivers.state import StateDir

    st = StateDir(tmp_path)
    (tmp_path / "files.json").write_text(json.dumps({"/m/r.yaml": "r"}))
    assert st.files() == {"/m/r.yaml": ["r"]}


def test_one_controller_per_state_directory(tmp_path):
    import pytest

    from reconciler.errors import ReconcilerError

    a = Controller(tmp_path / "m", tmp_path / "state", LocalDriver(tmp_path / "state"))
    b = Controller(tmp_path / "m", tmp_path / "state", LocalDriver(tmp_path / "state"))
    a.lock()
    with pytest.raises(ReconcilerError, match="another reconciler"):
        b.lock()


def _apply(c):
    got = c.load_manifests()
    for name, text in got.texts.items():
        c.state.write_last_applied(name, text)
    c.state.write_files(got.paths)
    return got


def test_a_broken_file_keeps_its_spec_even_when_this_host_no_longer_passes_preflight(tmp_path):
    from reconciler.recipe import cluster

    m = tmp_path / "manifests"
    m.mkdir()
    weights = tmp_path / "weights"
    weights.mkdir()
    cfg = tmp_path / "srtslurm.yaml"
    cfg.write_text(f"model_paths: {{q: {weights}}}\n")
    good = "name: r\nmodel: {path: q}\nengine: sglang\nroles: {agg: {workers: 1, gpus: 1}}\n"
    (m / "r.yaml").write_text(good)
    c = Controller(m, tmp_path / "state", LocalDriver(tmp_path / "state"), cluster=cluster.load(cfg))
    assert _apply(c).recipes["r"].model.path == str(weights)
    weights.rmdir()  # the login node lost its view of the weights (an NFS blip)
    (m / "r.yaml").write_text(good + "bogus: 1\n")
    again = c.load_manifests()
    assert again.recipes["r"].model.path == str(weights)  # still the spec that runs
    assert "bogus" in again.invalid["r"]


def test_a_broken_file_without_a_usable_last_spec_is_held_not_torn_down(tmp_path):
    m = tmp_path / "manifests"
    m.mkdir()
    (m / "r.yaml").write_text("name: r\nmodel: {path: m}\nengine: mocker\nroles: {agg: {workers: 1, gpus: 1}}\n")
    c = Controller(m, tmp_path / "state", LocalDriver(tmp_path / "state"))
    _apply(c)
    c.state.write_status("r", {"phase": "Running"})
    (tmp_path / "state" / "r" / "last-applied.yaml").write_text("name: [\n")  # unusable
    (tmp_path / "state" / "files.json").unlink()  # and the file map lost too
    (m / "r.yaml").write_text("name: r\nmodel: {path: m}\nengine: nope\n")
    snap = c.snapshot()  # while the edit settles
    assert "r" not in snap.desired.recipes and "r" in snap.desired.held
    os.utime(m / "r.yaml", (1, 1))  # settled
    snap = c.snapshot()
    assert "r" not in snap.desired.recipes and "r" in snap.desired.held


def test_files_json_lost_and_a_sweep_broken_keeps_every_variant(tmp_path):
    m = tmp_path / "manifests"
    m.mkdir()
    (m / "sw.yaml").write_text(SWEEP % "[1, 2]")
    c = Controller(m, tmp_path / "state", LocalDriver(tmp_path / "state"))
    _apply(c)
    for name in ("sw_w1", "sw_w2"):  # known recipes have a status
        c.state.write_status(name, {"phase": "Running"})
    (tmp_path / "state" / "files.json").unlink()
    (m / "sw.yaml").write_text(SWEEP % "[1, 2], extra: 1")
    broken = c.load_manifests()
    assert sorted(broken.recipes) == ["sw_w1", "sw_w2"]


def test_a_name_kept_by_a_broken_file_is_not_taken_over_by_another_file(tmp_path):
    m = tmp_path / "manifests"
    m.mkdir()
    (m / "a.yaml").write_text("name: sw_w1\nmodel: {path: m}\nengine: mocker\nroles: {agg: {workers: 3, gpus: 1}}\n")
    (m / "z.yaml").write_text(SWEEP % "[1, 2]")
    c = Controller(m, tmp_path / "state", LocalDriver(tmp_path / "state"))
    first = _apply(c)
    assert first.recipes["sw_w1"].roles.agg.workers == 3 and "also used by" in first.invalid["sw_w1"]
    (m / "a.yaml").write_text("name: sw_w1\nmodel: {path: m}\nengine: nope\n")
    broken = c.load_manifests()
    assert broken.recipes["sw_w1"].roles.agg.workers == 3  # a.yaml's last spec, not z.yaml's variant


def test_launch_to_ready_is_kept_per_life_and_the_last_one_survives_a_relaunch(tmp_path):
    from reconciler.drivers.state import StateDir

    st = StateDir(tmp_path)
    st.count_launch("r", "agg_0", 100.0, restart=False, slot=1)
    st.note_ready_after("r", "agg_0", 99.0, 5.0)  # another life's launch time: not this one's
    assert "readyAfter" not in st.launches("r")["agg_0"]
    st.note_ready_after("r", "agg_0", 100.0, 42.5)
    st.note_ready_after("r", "agg_0", 100.0, 60.0)  # the first Ready of a life counts
    rec = st.launches("r")["agg_0"]
    assert rec["readyAfter"] == 42.5 and rec["slot"] == 1
    st.count_launch("r", "agg_0", 200.0, restart=True)
    rec = st.launches("r")["agg_0"]
    assert "readyAfter" not in rec and rec["lastReadyAfter"] == 42.5 and rec["slot"] == 0


def test_a_removed_lock_file_is_made_and_locked_again_so_a_second_run_cannot_start(tmp_path):
    """`rm -rf state/*` under a running reconciler: the lock comes back at the next pass."""
    import pytest

    from reconciler.errors import ReconcilerError

    m = tmp_path / "manifests"
    m.mkdir()
    c = Controller(m, tmp_path / "state", LocalDriver(tmp_path / "state"), allow_empty=True)
    c.lock()
    for f in (tmp_path / "state").iterdir():
        if f.is_file():
            f.unlink()
    c.step(5.0)
    assert (tmp_path / "state" / "run.lock").read_text() == f"{os.getpid()}\n"
    second = Controller(m, tmp_path / "state", LocalDriver(tmp_path / "state"), allow_empty=True)
    with pytest.raises(ReconcilerError, match="another reconciler"):
        second.lock()
    # the other way round: a second run took the new file first; the first one stops, it does not fight
    (tmp_path / "state" / "run.lock").unlink()
    second.lock()
    with pytest.raises(ReconcilerError, match="another reconciler"):
        c.step(5.0)
    assert c._stop.is_set()


def test_ports_taken_by_a_build_that_failed_are_released_for_the_next_recipe(tmp_path):
    from reconciler.drivers.memory import MemoryDriver

    m = tmp_path / "manifests"
    m.mkdir()
    text = "name: {n}\nmodel: {{path: m}}\nengine: mocker\nfrontend: {{type: none}}\nroles: {{agg: {{workers: {w}, gpus: 1}}}}\n"
    (m / "a-big.yaml").write_text(text.format(n="a-big", w=3))  # built first: cannot get ports for all three
    (m / "b-small.yaml").write_text(text.format(n="b-small", w=1))
    c = Controller(m, tmp_path / "state", MemoryDriver(host="node0"))
    c.debounce = 0
    c.ports.set_range(28400, 28402)  # two ports on the node
    for _ in range(3):  # allocations submitted, then the units get their ports
        snap, _ = c.tick()
    assert "PortsExhausted" in snap.desired.held["a-big"]
    assert "b-small" in snap.desired.recipes  # it got a port the failed build had taken
    assert {o.split("/")[0] for o in c.ports.owners()} == {"b-small"}
