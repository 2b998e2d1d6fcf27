"""A file whose ``name:`` changes (shell/renames.py over core/plan/rename.py), pass by pass as the
running controller makes them, from what is on disk: the old deployment held on its last applied
spec, a restart carrying on, an invalid save, a rename back, a name another file holds."""

from __future__ import annotations

import json
import os

from reconciler.core.plan.rename import Step
from reconciler.drivers.local import LocalDriver
from reconciler.shell import renames
from reconciler.shell.gateway.local import gateway_host
from reconciler.shell.loop import Controller

TEXT = "name: {name}\nmodel: {{path: m}}\nengine: mocker\nroles: {{agg: {{workers: {workers}, gpus: 1}}}}\n"


_saves = iter(range(1, 10**6))


def _write(path, text) -> None:
    path.write_text(text)
    t = next(_saves)
    os.utime(path, (t, t))  # settled: applied at once (a new mtime each save, as an editor's)


def _pass(c: Controller, now: float):
    """One pass's manifests, recorded as `record` does (last applied, files, renames, events)."""
    m = c.load_manifests(now)
    for name, text in m.texts.items():
        c.state.write_last_applied(name, text)
    c.state.write_files(m.paths)
    renames.record_changes(c.state, m)
    for name in m.recipes:  # a status row, as record writes one (the rename reads the new one's)
        if not c.state.status(name):
            c.state.write_status(name, {"name": name, "phase": "Progressing"})
    return m


def _events(c: Controller) -> list[str]:
    path = c.state.root / "events.jsonl"
    return [json.loads(line)["kind"] for line in path.read_text().splitlines()] if path.exists() else []


def _setup(tmp_path):
    man = tmp_path / "manifests"
    man.mkdir()
    f = man / "app.yaml"
    _write(f, TEXT.format(name="old", workers=2))
    c = Controller(man, tmp_path / "state", LocalDriver(tmp_path / "state"))
    m = _pass(c, 100.0)
    assert set(m.recipes) == {"old"} and not m.renames
    return man, f, c


def test_a_rename_holds_the_old_deployment_until_the_new_one_serves_its_endpoint(tmp_path):
    man, f, c = _setup(tmp_path)
    _write(f, TEXT.format(name="new", workers=1))
    m = _pass(c, 200.0)
    # the old one runs on, on its last applied spec; the new one comes up beside it
    assert m.recipes["old"].roles.agg.workers == 2 and m.recipes["new"].roles.agg.workers == 1
    r = m.renames["new"]
    assert (r.old, r.step, r.since) == ("old", Step.STARTING, 200.0)
    assert json.loads((c.state.root / "files.json").read_text()) == {str(f): ["new", "old"]}
    assert json.loads((c.state.root / "renames.json").read_text())[str(f)]["old"] == "old"
    assert "Renaming" in _events(c)
    assert renames.reason(m, "old")[0] == "BeingReplaced" and renames.reason(m, "new")[0] == "Replacing"

    # a restarted reconciler (no memory) decides the same from state/
    c2 = Controller(man, c.state.root, LocalDriver(c.state.root))
    m2 = _pass(c2, 300.0)
    assert set(m2.recipes) == {"old", "new"} and m2.renames["new"].since == 200.0

    # the new one Ready, the old one with no gateway on this host: nothing to hand over, the old goes
    c2.state.write_status("new", {"name": "new", "phase": "Ready"})
    m3 = _pass(c2, 400.0)
    assert set(m3.recipes) == {"new"} and not m3.renames
    assert not (c.state.root / "renames.json").exists()
    assert json.loads((c.state.root / "files.json").read_text()) == {str(f): ["new"]}
    assert _events(c2)[-1] == "Renamed"


def test_the_new_one_ready_hands_the_old_gateways_address_over(tmp_path):
    man, f, c = _setup(tmp_path)
    (c.state.root / "old" / "gateway.json").write_text(json.dumps({"host": gateway_host(), "port": 18123}))
    _write(f, TEXT.format(name="new", workers=1))
    assert _pass(c, 200.0).renames["new"].step is Step.STARTING
    c.state.write_status("new", {"name": "new", "phase": "Ready"})
    m = _pass(c, 300.0)
    assert m.renames["new"].step is Step.HANDING_OVER and "old" in m.recipes  # held while the address moves
    assert "RenameHandOver" in _events(c)


def test_an_invalid_save_keeps_the_rename_where_it_is(tmp_path):
    man, f, c = _setup(tmp_path)
    _write(f, TEXT.format(name="new", workers=1))
    _pass(c, 200.0)
    _write(f, TEXT.format(name="new", workers="[1]"))  # a typo
    m = _pass(c, 300.0)
    assert set(m.recipes) == {"old", "new"} and m.renames["new"].step is Step.STARTING
    assert "new" in m.invalid  # the refusal shown; both run on their last applied specs


def test_a_first_save_that_is_invalid_keeps_the_old_one_running_invalid(tmp_path):
    man, f, c = _setup(tmp_path)
    _write(f, TEXT.format(name="new", workers="[1]"))
    m = _pass(c, 200.0)
    assert set(m.recipes) == {"old"} and "old" in m.invalid and not m.renames


def test_renamed_back_before_the_hand_over_the_new_one_goes(tmp_path):
    man, f, c = _setup(tmp_path)
    _write(f, TEXT.format(name="new", workers=1))
    _pass(c, 200.0)
    _write(f, TEXT.format(name="old", workers=2))
    m = _pass(c, 300.0)
    assert set(m.recipes) == {"old"} and not m.renames
    assert not (c.state.root / "renames.json").exists() and _events(c)[-1] == "RenameAbandoned"


def test_renamed_again_the_old_one_keeps_the_endpoint_for_the_third(tmp_path):
    man, f, c = _setup(tmp_path)
    _write(f, TEXT.format(name="new", workers=1))
    _pass(c, 200.0)
    _write(f, TEXT.format(name="third", workers=1))
    m = _pass(c, 300.0)
    assert set(m.recipes) == {"old", "third"} and m.renames["third"].old == "old"


def test_a_rename_onto_a_name_another_file_holds_keeps_the_old_one(tmp_path):
    man, f, c = _setup(tmp_path)
    _write(man / "other.yaml", TEXT.format(name="taken", workers=1))
    _pass(c, 150.0)
    _write(f, TEXT.format(name="taken", workers=3))
    m = _pass(c, 200.0)
    assert m.recipes["taken"].roles.agg.workers == 1  # the other file's
    assert m.recipes["old"].roles.agg.workers == 2 and "also used by" in m.invalid["old"]
    assert not m.renames


def test_describe_names_the_rename_from_the_record(tmp_path):
    from reconciler.cli import describe_recorded

    # the reasons describe reads back are the ones the rename writes (one leaf module: record_names)
    assert set(describe_recorded.RENAME_REASONS) == {renames.BEING_REPLACED, renames.REPLACING}
    root = tmp_path / "old"
    root.mkdir()
    (root / "status.json").write_text(json.dumps({"phase": "Ready", "reason": "BeingReplaced",
                                                  "reasonMessage": "renamed to new in app.yaml"}))
    (root / describe_recorded.FILE).write_text("{}")
    doc = describe_recorded.doc(tmp_path, "old", 0.0)
    assert doc["rename"] == {"reason": "BeingReplaced", "message": "renamed to new in app.yaml"}


def test_a_hand_edited_record_is_set_aside_and_every_deployment_reconciled(tmp_path):
    """A record a hand broke (a time as text, a list, a step unknown, a name twice) is said as a
    corrupt state and left out; the pass goes on for every file, and a rename whose record it was
    is found again from files.json (the old one still held until the new one takes over)."""
    man, f, c = _setup(tmp_path)
    _write(man / "unrelated.yaml", TEXT.format(name="unrelated", workers=1))
    _write(f, TEXT.format(name="new", workers=1))
    _pass(c, 200.0)
    p = c.state.root / "renames.json"
    for bad in ({"since": "2024-01-01T00:00:00Z"}, {"since": [1]}, {"step": ["x"]}, {"new": "old"}):
        doc = json.loads(p.read_text())
        doc[str(f)].update(bad)
        doc["/elsewhere/gone.yaml"] = {"old": "a", "new": "b", "since": 1.0, "step": "Starting"}  # a good one beside
        p.write_text(json.dumps(doc))
        assert set(renames.recorded(c.state)) == {"/elsewhere/gone.yaml"}
        m = _pass(c, 300.0)
        assert set(m.recipes) == {"old", "new", "unrelated"}, bad
        assert m.renames["new"].old == "old" and m.renames["new"].step is Step.STARTING
        assert _events(c)[-1] != "Renamed" and "CorruptState" in _events(c)
        assert set(json.loads(p.read_text())) == {str(f)}  # written again from this pass's renames


def test_the_record_lost_mid_rename_the_old_one_is_not_deleted(tmp_path):
    """files.json still says the file holds the new name and the old one: the rename is found again
    from there (its step from the facts), never taken for a sweep cut down to one name."""
    man, f, c = _setup(tmp_path)
    _write(f, TEXT.format(name="new", workers=1))
    _pass(c, 200.0)
    for lose in ("{truncated", None):
        p = c.state.root / "renames.json"
        if lose is None:
            p.unlink()
        else:
            p.write_text(lose)
        c2 = Controller(man, c.state.root, LocalDriver(c.state.root))  # a restart, too
        m = _pass(c2, 300.0)
        assert set(m.recipes) == {"old", "new"} and m.recipes["old"].roles.agg.workers == 2
        assert m.renames["new"].old == "old" and json.loads(p.read_text())[str(f)]["new"] == "new"
    c2.state.write_status("new", {"name": "new", "phase": "Ready"})
    p.unlink()
    m = _pass(c2, 400.0)
    assert set(m.recipes) == {"new"}  # the new one Ready, nothing to hand over: the old one goes


def test_a_sweep_cut_down_to_one_name_is_no_rename(tmp_path):
    man, f, c = _setup(tmp_path)
    s = man / "sweep.yaml"
    _write(s, "name: sw\nmodel: {path: m}\nengine: mocker\nroles: {agg: {workers: '{w}', gpus: 1}}\n"
              "sweep: {w: [1, 2]}\n")
    names = set(_pass(c, 150.0).recipes) - {"old"}
    assert len(names) == 2, names
    keep = sorted(names)[0]
    _write(s, TEXT.format(name=keep, workers=1))
    m = _pass(c, 200.0)
    assert set(m.recipes) == {"old", keep} and not m.renames


def test_an_old_gateway_on_another_host_is_not_handed_over(tmp_path):
    """A standby took over on another host (or this one was renamed): the old gateway's address
    cannot be bound here, so the rename goes as where there is none (the old one goes once the new
    one is Ready, the endpoint moves), and an event says why; never stuck handing over."""
    man, f, c = _setup(tmp_path)
    (c.state.root / "old" / "gateway.json").write_text(json.dumps({"host": "elsewhere", "port": 18123}))
    _write(f, TEXT.format(name="new", workers=1))
    assert _pass(c, 200.0).renames["new"].step is Step.STARTING
    c.state.write_status("new", {"name": "new", "phase": "Ready"})
    m = _pass(c, 300.0)
    assert set(m.recipes) == {"new"} and not m.renames
    assert "RenameEndpointMoved" in _events(c)
    ev = [json.loads(x) for x in (c.state.root / "events.jsonl").read_text().splitlines()]
    assert any("elsewhere" in e["message"] for e in ev if e["kind"] == "RenameEndpointMoved")


def _rename_onto_a_held_name(tmp_path, hold):
    man, f, c = _setup(tmp_path)
    other = man / "other.yaml"
    _write(other, TEXT.format(name="taken", workers=1))
    _pass(c, 150.0)
    hold(other)
    _write(f, TEXT.format(name="taken", workers=3))  # app.yaml sorts first: it reads `taken` first
    return c, _pass(c, 200.0)


def test_a_rename_onto_a_name_held_by_an_invalid_file_keeps_the_old_one(tmp_path):
    c, m = _rename_onto_a_held_name(tmp_path, lambda o: _write(o, TEXT.format(name="taken", workers="[1]")))
    assert m.recipes["taken"].roles.agg.workers == 1  # the other file's, on its last applied spec
    assert m.recipes["old"].roles.agg.workers == 2 and "also used by" in m.invalid["old"]
    assert not m.renames


def test_a_rename_onto_a_name_held_within_its_delete_grace_keeps_the_old_one(tmp_path):
    # the other file gone a moment (an editor's save): its name is held for the delete grace
    c, m = _rename_onto_a_held_name(tmp_path, lambda o: o.unlink())
    assert m.recipes["taken"].roles.agg.workers == 1  # the other file's, on its last applied spec
    assert m.recipes["old"].roles.agg.workers == 2 and "also used by" in m.invalid["old"]
    assert not m.renames


def test_a_rename_that_fails_to_advance_stays_where_it_was(tmp_path, monkeypatch):
    """Whatever breaks one file's rename (a state file unreadable in a new way) fails neither the
    pass nor the other files: the rename stays where it was recorded, the old one held."""
    man, f, c = _setup(tmp_path)
    _write(man / "unrelated.yaml", TEXT.format(name="unrelated", workers=1))
    _write(f, TEXT.format(name="new", workers=1))
    _pass(c, 200.0)

    def broken(*a, **kw):
        raise OSError("EIO")

    monkeypatch.setattr(renames, "_gateway", broken)
    m = _pass(c, 300.0)
    assert set(m.recipes) == {"old", "new", "unrelated"} and m.renames["new"].step is Step.STARTING
