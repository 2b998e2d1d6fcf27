"""End to end, faults: a worker that exits, crash-loops, hangs, or finds its port taken.

Same harness as test_e2e.py (both drivers); every wait is bounded and reads the cluster.
"""

from __future__ import annotations

import json

import pytest

from harness import Harness
from helpers import wait_until
from support.clusters import h  # noqa: F401 - fixtures among them
from support.recipes import KEEP


def test_exit_status_of_a_dead_worker_is_recorded(h):
    name = h.name("exit")
    (h.manifests / f"{name}.yaml").write_text(
        KEEP.format(name=name).replace("workers: 1, gpus: 1", "workers: 1, gpus: 1, args: {crash-after: 1}"))
    h.start()
    wait_until(lambda: (h.state / name / "logs" / "agg_0.0.exit").exists(), timeout=30, what="an exit record")
    code = int((h.state / name / "logs" / "agg_0.0.exit").read_text().split()[0])
    assert code == 3  # the mocker's --crash-after exit code, through srun and the launcher
    wait_until(lambda: json.loads((h.state / name / "status.json").read_text())["workers"][0]["lastExit"],
               timeout=20, what="lastExit in status")
    logs = "".join(p.read_text() for p in (h.state / name / "logs").glob("agg_0.0.log*"))
    assert "FATAL mocker: simulated engine crash" in logs


def _status(h: Harness, name: str) -> dict:
    try:
        return json.loads((h.state / name / "status.json").read_text())
    except (FileNotFoundError, ValueError):
        return {}


def _row(h: Harness, name: str, unit: str) -> dict:
    return next((w for w in _status(h, name).get("workers", []) if w["name"] == unit), {})


def test_crash_loop_backs_off_and_never_policy_gives_up(h):
    loop = h.name("loop")
    once = h.name("once")
    (h.manifests / f"{loop}.yaml").write_text(KEEP.format(name=loop).replace(
        "workers: 1, gpus: 1", "workers: 1, gpus: 1, args: {crash-after: 0.5}, "
        "restart: {backoff_seconds: 1, max_backoff_seconds: 2}"))
    (h.manifests / f"{once}.yaml").write_text(KEEP.format(name=once).replace(
        "workers: 1, gpus: 1", "workers: 1, gpus: 1, args: {crash-after: 0.5}, restart: never"))
    h.start()
    wait_until(lambda: _row(h, loop, "agg_0").get("restarts", 0) >= 2, timeout=40, what="two restarts")
    rec = json.loads((h.state / loop / "launches.json").read_text())["agg_0"]
    assert rec["restarts"] >= 2 and rec["backoff"] >= 2  # the backoff counter grows with each failed life
    # Failed may come first from the engine's fatal log line, a pass before the launcher's exit
    # record is written (its code then follows): wait for both, not for the first of them
    row = wait_until(lambda: (r := _row(h, once, "agg_0")).get("phase") == "Failed" and r.get("lastExit") and r,
                     timeout=30, what="never: Failed, with its exit")
    assert row["lastExit"]["code"] == 3 and row["restarts"] == 0
    degraded = next(c for c in _status(h, once)["conditions"] if c["type"] == "Degraded")
    assert degraded["status"] == "True" and degraded["reason"] == "WorkersFailed"
    progressing = next(c for c in _status(h, once)["conditions"] if c["type"] == "Progressing")
    assert progressing["status"] == "False" and progressing["reason"] == "WorkersFailed"
    assert h.get(once)["status"] == "Degraded"
    assert "not restarted: agg_0" in degraded["message"]
    h.idle(once)
    assert not h.steps(once)


@pytest.mark.parametrize("markers", [True, False], ids=["fatal-log-line", "liveness-probes"])
def test_hung_engine_is_detected_and_relaunched(h, markers):
    name = h.name("hang")
    text = KEEP.format(name=name).replace(
        "workers: 1, gpus: 1", "workers: 1, gpus: 1, args: {hang-after: 2}, restart: {backoff_seconds: 0.5}")
    text += f"health_check: {{fatal_log_markers: {str(markers).lower()}}}\nreconcile: {{liveness_failures: 2}}\n"
    (h.manifests / f"{name}.yaml").write_text(text)
    h.start()
    first = h.wait_steps(name, {"agg_0"})["agg_0"]
    # Ready as run saw it (its Condition event): a `get` started in the few seconds before the hang
    # may take longer than that on a loaded machine, and would then never see it Ready
    events = h.state / "events.jsonl"
    wait_until(lambda: events.exists() and f'"{name}", "message": "Ready=True' in events.read_text(), timeout=60,
               what=f"{name} Ready (reconciler log:\n{h.log()[-3000:]})")
    wait_until(lambda: (s := h.steps(name).get("agg_0")) and s[0] != first[0], timeout=40, what="relaunch of the hung engine")
    events = (h.state / "events.jsonl").read_text()
    assert ("fatal log line: FATAL mocker: simulated engine hang" in events) == markers
    assert ("health probes failed in a row" in events) == (not markers)


def test_a_port_taken_by_a_foreign_process_is_replaced(h):
    import socket

    lo = int(h.env["RECONCILER_PORT_RANGE"].split("-")[0])
    squatter = socket.socket()
    squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    squatter.bind(("0.0.0.0", lo))
    squatter.listen()
    try:
        name = h.name("squat")
        (h.manifests / f"{name}.yaml").write_text(KEEP.format(name=name).replace(
            "workers: 1, gpus: 1", "workers: 1, gpus: 1, restart: {backoff_seconds: 0.5}"))
        h.start()
        h.wait_ready(name, timeout=60)
        row = _row(h, name, "agg_0")
        assert row["ports"]["http"] != lo
        events = (h.state / "events.jsonl").read_text()
        assert "PortConflict" in events and f":{lo}" in events
        ports = json.loads((h.state / "ports.json").read_text())
        assert str(lo) in next(iter(ports["blocked"].values()))
    finally:
        squatter.close()
