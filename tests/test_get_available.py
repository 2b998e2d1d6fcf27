"""`get`'s kubectl columns (READY / UP-TO-DATE / AVAILABLE) and `get --wait --for`, on status files
as `run` records them (no cluster: the real Slurm's run is tests/test_available_e2e.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reconciler.cli import deployments, get_wait, recorded


def cond(kind: str, status: bool, reason: str) -> dict:
    return {"type": kind, "status": "True" if status else "False", "reason": reason, "message": "m"}


def doc(phase: str, ready: bool, available: bool, progressing: tuple[bool, str], replicas: dict,
        generation: str = "g2") -> dict:
    return {"name": "r", "phase": phase, "observedGeneration": generation, "createdAt": "2026-01-01T00:00:00Z",
            "roles": {"agg": {"desired": replicas["desired"], "ready": replicas["ready"], "running": 4,
                              "unavailable": replicas["desired"] - replicas["ready"]}},
            "replicas": replicas, "workers": [],
            "conditions": [cond("Ready", ready, "AllReady" if ready else "NotReady"),
                           cond("Available", available, "MinimumWorkersAvailable" if available else "MinimumWorkersUnavailable"),
                           cond("Progressing", *progressing)]}


# a rolling update of 4 workers: 1 at the new spec, 3 old lives and the new one serving
ROLLING = doc("Progressing", False, True, (True, "Reconciling"), {"desired": 4, "ready": 1, "upToDate": 1, "available": 4})
CONVERGED = doc("Ready", True, True, (False, "Converged"), {"desired": 4, "ready": 4, "upToDate": 4, "available": 4})
# every worker at the new spec Ready, the old lives still leaving the routers
FINISHING = doc("Ready", True, True, (True, "Reconciling"), {"desired": 4, "ready": 4, "upToDate": 4, "available": 4})
DOWN = doc("Progressing", False, False, (True, "WaitingForReady"), {"desired": 2, "ready": 0, "upToDate": 2, "available": 0})


def write(state: Path, st: dict) -> None:
    (state / "r").mkdir(parents=True, exist_ok=True)
    (state / "r" / "status.json").write_text(json.dumps(st))


def test_the_table_shows_ready_up_to_date_and_available_like_kubectl(tmp_path, capsys):
    write(tmp_path, ROLLING)
    row = recorded.row(tmp_path, "r", json.loads((tmp_path / "r" / "status.json").read_text()), now=0.0)
    deployments.print_table([row], "m")
    head, line = capsys.readouterr().out.splitlines()
    assert head.split()[:5] == ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "STATUS"]
    assert line.split()[:5] == ["r", "agg:1/4", "1", "4", "Progressing"]
    # a status recorded before these totals existed: '-', not a made-up number
    old = {k: v for k, v in ROLLING.items() if k != "replicas"}
    assert deployments.table_rows([recorded.row(tmp_path, "r", old, now=0.0)])[0][2:4] == ("-", "-")


@pytest.mark.parametrize("st, until, met", [
    (ROLLING, "available", True), (ROLLING, "ready", False), (ROLLING, "progressed", False),
    (FINISHING, "available", True), (FINISHING, "ready", True), (FINISHING, "progressed", False),
    (CONVERGED, "available", True), (CONVERGED, "ready", True), (CONVERGED, "progressed", True),
    (DOWN, "available", False), (DOWN, "ready", False), (DOWN, "progressed", False),
])
def test_what_wait_for_waits_for(tmp_path, st, until, met):
    write(tmp_path, st)
    (row,) = get_wait.recorded_rows(tmp_path, ["r"], {"r": "g2"}, until)
    assert row["ready"] is met
    # a status of an earlier version of the file never meets anything
    (row,) = get_wait.recorded_rows(tmp_path, ["r"], {"r": "g3"}, until)
    assert row["ready"] is False


def test_a_status_without_available_is_waited_on_as_ready(tmp_path):
    """Written by a `run` from before the condition: --for available does not wait forever."""
    for st, met in ((CONVERGED, True), (ROLLING, False)):
        write(tmp_path, {**st, "conditions": [c for c in st["conditions"] if c["type"] != "Available"]})
        (row,) = get_wait.recorded_rows(tmp_path, ["r"], {"r": "g2"}, "available")
        assert row["ready"] is met


def test_wait_for_available_returns_during_a_rollout_and_for_ready_times_out_naming_it(tmp_path, capsys):
    write(tmp_path, ROLLING)
    assert get_wait.wait(tmp_path, ["r"], {"r": "g2"}, timeout=20, poll=0.05, until="available") is True
    assert get_wait.wait(tmp_path, ["r"], {"r": "g2"}, timeout=0.2, poll=0.05, until="ready") is False
    assert "not Ready after" in capsys.readouterr().err
    write(tmp_path, DOWN)
    assert get_wait.wait(tmp_path, ["r"], {"r": "g2"}, timeout=0.2, poll=0.05, until="available") is False
    assert "not Available after" in capsys.readouterr().err


def test_get_for_implies_wait_and_refuses_an_unknown_condition():
    from click.testing import CliRunner

    from reconciler.cli.get import get

    r = CliRunner().invoke(get, ["--for", "happy"])
    assert r.exit_code == 2 and "'happy' is not one of 'available', 'ready', 'progressed'" in r.output


def test_the_status_page_shows_available_and_the_counts():
    from reconciler.ui import model
    from reconciler.ui.page import PAGE

    d = model.deployment("r", ROLLING, {}, None)
    assert d["available"] is True and d["replicas"] == ROLLING["replicas"] and d["progress"] == "m"
    assert model.deployment("r", DOWN, {}, None)["available"] is False
    assert model.deployment("r", {"phase": "Ready", "conditions": []}, {}, None)["available"] is None  # an old record
    assert "<th>UP-TO-DATE</th><th>AVAILABLE</th>" in PAGE and 'count(d, "available")' in PAGE


def test_a_refused_rollout_ends_the_wait_for_available_with_its_message(tmp_path, capsys):
    """Rollout analysis refused the edit: the old lives serve (Available), and the wait still fails."""
    refused = doc("Degraded", False, True, (False, "RolloutFailed"), ROLLING["replicas"])
    write(tmp_path, refused)
    assert get_wait.wait(tmp_path, ["r"], {"r": "g2"}, timeout=20, poll=0.05, until="available") is False
    assert "error: r: m" in capsys.readouterr().err
