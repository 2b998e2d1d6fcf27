"""A missing or broken file does not hide what runs (issue 46, item 3), on the real Slurm: a syntax
error keeps READY, the endpoint and the model shown; the last manifest deleted leaves a deployment the
prune guard keeps, listed by `get`, `describe`, the events and the status page with its units, endpoint,
served model and a warning; `reconciler prune NAME` tears it down at the running `run`'s next pass.

Every check reads the cluster (squeue), the endpoint itself or the CLI as a user runs it."""

from __future__ import annotations

import json

from helpers import free_port, get, post, wait_until
from support.clusters import slurm_h  # noqa: F401 - the fixture h: a harness on the real Slurm
from support.recipes import DISAGG

MODEL = "Qwen/Qwen3-0.6B"


def _completes(endpoint: str) -> bool:
    status, _ = post(endpoint + "/v1/chat/completions",
                     {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})
    return status == 200


def _events(h, name: str) -> list[dict]:
    return [e for e in map(json.loads, (h.state / "events.jsonl").read_text().splitlines()) if e.get("recipe") == name]


def test_a_missing_or_broken_file_shows_what_runs_and_prune_confirms_the_teardown(h):
    name = h.name("kept")
    f = h.manifests / f"{name}.yaml"
    text = DISAGG.format(name=name, decode=1)
    f.write_text(text)
    ui = free_port()
    h.start("--ui-addr", f"127.0.0.1:{ui}")
    endpoint = h.wait_ready(name, timeout=90)["endpoint"]
    wait_until(lambda: _completes(endpoint), timeout=30, what="a completion through the gateway")
    running = h.steps(name)
    pid = h.proc.pid

    # an explicit prune of a deployment whose file is there is refused, and nothing moves
    r = h.cli("prune", name)
    assert r.returncode != 0 and "has a manifest" in r.stderr, r.stderr
    r = h.cli("prune", "no-such-deployment")
    assert r.returncode != 0 and "no deployment named no-such-deployment" in r.stderr, r.stderr

    # a syntax error in the live recipe: Invalid, yet READY, ENDPOINT and MODEL stay shown
    f.write_text(text + "roles: [\n")
    wait_until(lambda: h.get(name)["status"] == "Invalid", timeout=30, what="Invalid status")
    r = h.cli("get", name, "-o", "wide")
    row = r.stdout.splitlines()[1]
    assert "prefill:1/1 decode:1/1" in row and endpoint in row and MODEL in row, r.stdout
    assert "YAML syntax error" in r.stderr
    r = h.cli("describe", name)  # from the cluster, not from run's record
    assert f"Endpoint: {endpoint}" in r.stdout and f"Model: {MODEL}" in r.stdout, r.stdout
    units = r.stdout.split("Units:")[1].split("Allocations:")[0]
    # (describe probes each unit once, 1 s: its phases are load-dependent, the units are not)
    assert all(f"{u} " in units for u in ("prefill_0", "decode_0", "frontend_0")), units
    assert _completes(endpoint)
    f.write_text(text)
    wait_until(lambda: h.get(name)["status"] == "Ready", timeout=30, what="Ready again with the file fixed")

    # the last manifest deleted: the prune guard keeps it, and every read says what runs and why
    f.unlink()
    g = wait_until(lambda: (g := h.get(name))["status"] == "ManifestMissing" and g.get("warning") and g,
                   timeout=30, what="ManifestMissing recorded with its warning")
    assert g["reason"] == "ManifestMissing" and "reconciler prune" in g["reasonMessage"], g
    # its units probed as any deployment's (the record of run's last probe: waited on, not read once)
    wait_until(lambda: {r: c["ready"] for r, c in h.get(name)["roles"].items()} == {"prefill": 1, "decode": 1},
               timeout=30, what="the kept units Ready")
    assert g["endpoint"] == endpoint and g["servedModel"] == MODEL and g["error"] is None, g
    r = h.cli("get", name)
    assert "prefill:1/1 decode:1/1" in r.stdout and endpoint in r.stdout and "ManifestMissing" in r.stdout, r.stdout
    assert "warning: " in r.stderr and "invalid:" not in r.stderr, r.stderr
    r = h.cli("describe", name)
    assert r.returncode == 0, r.stderr
    conditions = r.stdout.split("Conditions:")[1].split("Units:")[0]
    assert "Warning: ManifestMissing: " in r.stdout and "the recipe file validates" not in conditions, r.stdout
    assert "Invalid      True   ManifestMissing" in conditions, conditions
    assert f"Endpoint: {endpoint}" in r.stdout and f"Model: {MODEL}" in r.stdout, r.stdout
    units = r.stdout.split("Units:")[1].split("Allocations:")[0]
    assert all(f"{u} " in units for u in ("prefill_0", "decode_0", "frontend_0")), units
    warned = [e for e in _events(h, name) if e["kind"] == "ManifestMissing"]
    assert len(warned) == 1 and warned[0]["type"] == "Warning", warned
    page = wait_until(lambda: next((d for d in json.loads(get(f"http://127.0.0.1:{ui}/api/status")[1])["deployments"]
                                    if d["name"] == name and d.get("warning") and all(w["ready"] for w in d["workers"])),
                                   None),
                      timeout=20, what="the status page's ManifestMissing, its workers Ready")
    assert page["phase"] == "ManifestMissing" and page["endpoint"] == endpoint and page["servedModel"] == MODEL
    assert {w["name"] for w in page["workers"]} == {"prefill_0", "decode_0"}
    h.idle(name)
    assert h.steps(name) == running, "the prune guard touches nothing"
    assert _completes(endpoint), "what the guard keeps still serves"

    # the operator confirms: said what goes; the same `run` tears it down at its next pass
    r = h.cli("prune", name)
    assert r.returncode == 0, r.stderr
    assert "teardown confirmed" in r.stdout and "cancel step" in r.stdout and "cancel allocation" in r.stdout, r.stdout
    wait_until(lambda: not h.steps(name) and not h.jobs(name), timeout=60, what="the confirmed teardown")
    assert h.proc.poll() is None and h.proc.pid == pid, "torn down without restarting run"
    wait_until(lambda: json.loads((h.state / name / "status.json").read_text())["phase"] == "Deleted", timeout=30,
               what="status Deleted")
    assert [e["kind"] for e in _events(h, name)].count("PruneConfirmed") == 1
    assert not (h.state / name / "prune.json").exists(), "the confirmation goes with the deployment"
    r = h.cli("prune", name)
    assert r.returncode != 0, "nothing left to prune"
