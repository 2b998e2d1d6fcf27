"""End to end: `reconciler run` against a real Slurm (and the local driver), mocker recipes.

Every wait is bounded; every check reads the cluster itself (squeue for Slurm, the
process table for local), not the reconciler's own bookkeeping.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from harness import Harness, scancel, sh
from helpers import get, post, wait_until
from load import scaled
from support.clusters import h  # noqa: F401 - fixtures among them
from support.recipes import DISAGG, KEEP

ROOT = Path(__file__).resolve().parents[1]


TWO_ALLOCS = """\
schema: 2
name: {name}
model: {{path: m}}
resources: {{gpus_per_node: 4}}
engine: {{type: mocker, speedup_ratio: 100}}
roles:
  agg: {{workers: 2, gpus: 4}}
frontend: {{type: none}}
reconcile: {{nodes_per_allocation: 1}}
"""


def test_deploy_scale_heal_and_delete(h):
    name = h.name("e2e")
    # as long as real TRT-LLM recipe names: its Slurm labels carry an abbreviation
    keep = h.name("keep-gb200-fp4-dsr1-1k1k-ctx4-gen1-dep32-batch256-eplb0-mtp3-disagg")
    (h.manifests / f"{keep}.yaml").write_text(KEEP.format(name=keep))
    f = h.manifests / f"{name}.yaml"
    f.write_text(DISAGG.format(name=name, decode=2))
    h.start()
    h.wait_steps(name, {"prefill_0", "decode_0", "decode_1", "frontend_0"})
    g = h.wait_ready(name)
    assert g["roles"] == {"prefill": {"desired": 1, "ready": 1, "running": 1, "unavailable": 0},
                          "decode": {"desired": 2, "ready": 2, "running": 2, "unavailable": 0}}
    endpoint = g["endpoint"]
    assert endpoint and endpoint.startswith("http://")
    for unit in ("prefill_0", "decode_0", "decode_1"):
        assert get(_url(h, name, unit) + "/health")[0] == 200
    status, body = wait_until(
        lambda: (r := post(endpoint + "/v1/chat/completions",
                           {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}))[0] == 200 and r,
        timeout=20, what="a chat completion through the router")
    assert json.loads(body)["usage"]["completion_tokens"] == 8

    # scale decode 2 -> 3: one more worker, and nothing that runs moves (desired/baseline.py): the
    # running job keeps the 3 GPUs it was packed for, the added worker gets a job of its own
    before = h.steps(name)
    old_jobs = h.jobs(name)
    f.write_text(DISAGG.format(name=name, decode=3))
    units = {"prefill_0", "decode_0", "decode_1", "decode_2", "frontend_0"}
    after = h.wait_steps(name, units)
    assert all(after[u] == before[u] for u in before)
    if h.driver == "slurm":
        (added,) = set(h.jobs(name)) - set(old_jobs)
        assert set(old_jobs) <= set(h.jobs(name)) and after["decode_2"][0].split(".")[0] == added
        assert sh("squeue", "-h", "-j", added, "-o", "%b").strip().endswith("gpu:1")

    # scale 3 -> 1: the highest indices go, nothing else moves
    f.write_text(DISAGG.format(name=name, decode=1))
    before, after = after, h.wait_steps(name, {"prefill_0", "decode_0", "frontend_0"})
    assert after["decode_0"] == before["decode_0"] and after["prefill_0"] == before["prefill_0"]

    # kill a worker step: it comes back on the same node and ports
    old_url = _url(h, name, "decode_0")
    victim = after["decode_0"]
    if h.driver == "slurm":
        scancel(victim[0])
    else:
        os.killpg(int(victim[0]), signal.SIGKILL)
    wait_until(lambda: (s := h.steps(name).get("decode_0")) and s[0] != victim[0], timeout=30, what="relaunch")
    assert h.steps(name)["decode_0"][1] == victim[1]
    wait_until(lambda: get(old_url + "/health")[0] == 200, timeout=30, what="relaunched worker healthy")
    assert _url(h, name, "decode_0") == old_url
    h.wait_ready(name)

    # delete the file: nothing of it is left; the other recipe is untouched
    keep_steps = h.steps(keep)
    f.unlink()
    wait_until(lambda: not h.steps(name) and not h.jobs(name), timeout=30, what="everything of the recipe cancelled")
    assert h.steps(keep) == keep_steps
    wait_until(lambda: json.loads((h.state / name / "status.json").read_text())["phase"] == "Deleted", timeout=10,
               what="status Deleted")


def test_every_manifest_gone_is_refused_and_sigterm_leaves_workloads(h):
    name = h.name("guard")
    (h.manifests / f"{name}.yaml").write_text(KEEP.format(name=name))
    h.start()
    running = h.wait_steps(name, {"agg_0"})
    # the repository's manifests/ keeps a README.md: a directory holding only it is still empty
    (h.manifests / "README.md").write_text((ROOT / "manifests" / "README.md").read_text())
    (h.manifests / f"{name}.yaml").unlink()
    wait_until(lambda: "refusing to prune" in h.log(), timeout=20, what="the prune guard")
    h.idle(name)
    assert h.steps(name) == running, "every manifest gone at once must be refused without --allow-empty"
    assert h.stop() == 0
    assert h.steps(name) == running, "stopping the reconciler must leave workloads running"
    r = h.cli("plan")
    assert r.returncode == 2 and "refusing to prune" in r.stdout, r.stdout
    assert "refused: cancel step" in r.stdout and "refused: cancel allocation" in r.stdout, r.stdout
    g = h.get(name)
    # shown from its last applied spec, probed: what runs, and why nothing is done about it
    assert g["status"] == "ManifestMissing" and "prune guard" in g["warning"]["message"] and not g["error"]
    assert g["roles"]["agg"]["running"] == 1, g["roles"]  # (ready: one probe of 1 s by this get, load-dependent)
    r = h.cli("run", "--once", "--allow-empty")
    assert r.returncode == 0, r.stderr
    wait_until(lambda: not h.steps(name) and not h.jobs(name), timeout=30, what="everything cancelled")


def test_kill9_mid_deploy_then_restart_adopts_without_duplicates(h):
    name = h.name("adopt")
    keep = h.name("keep")
    (h.manifests / f"{keep}.yaml").write_text(DISAGG.format(name=keep, decode=1).replace("builtin", "none"))
    (h.manifests / f"{name}.yaml").write_text(DISAGG.format(name=name, decode=4))
    h.start()
    wait_until(lambda: len(h.steps(name)) >= 1, timeout=60, what="first launches")
    h.kill9()
    partial = h.steps(name)
    h.start()
    units = {"prefill_0", "decode_0", "decode_1", "decode_2", "decode_3", "frontend_0"}
    final = h.wait_steps(name, units)
    h.wait_ready(name)
    # adopted steps were not replaced, nothing is duplicated (h.steps asserts uniqueness)
    for unit, sid in partial.items():
        assert final[unit] == sid, f"{unit} was relaunched after the restart"
    launches = json.loads((h.state / name / "launches.json").read_text())
    assert all(r["launches"] == 1 for r in launches.values()), launches
    h.idle(name)  # a few more ticks change nothing
    assert h.steps(name) == final


def test_recipe_that_needs_two_allocations(h):
    name = h.name("twoalloc")
    (h.manifests / f"{name}.yaml").write_text(TWO_ALLOCS.format(name=name))
    h.start()
    h.wait_steps(name, {"agg_0", "agg_1"})
    h.wait_ready(name)
    assert len(h.jobs(name)) == 2


def test_invalid_edit_keeps_last_good_spec_running(h):
    name = h.name("typo")
    f = h.manifests / f"{name}.yaml"
    f.write_text(DISAGG.format(name=name, decode=1))
    h.start()
    before = h.wait_steps(name, {"prefill_0", "decode_0", "frontend_0"})
    f.write_text(DISAGG.format(name=name, decode=1).replace("workers: 1, gpus: 1}", "workerz: 1, gpus: 1}", 1))
    wait_until(lambda: h.get(name)["status"] == "Invalid", timeout=20, what="Invalid status")
    g = h.get(name)
    assert "roles.prefill.workerz" in g["error"]
    h.idle(name)
    assert h.steps(name) == before  # nothing torn down, nothing restarted
    status = json.loads((h.state / name / "status.json").read_text())
    inv = next(c for c in status["conditions"] if c["type"] == "Invalid")
    assert inv["status"] == "True" and "last applied" in inv["message"]


def _url(h: Harness, recipe: str, unit: str) -> str:
    st = json.loads((h.state / recipe / "status.json").read_text()) if (h.state / recipe / "status.json").exists() else {}
    for w in st.get("workers", []):
        if w["name"] == unit and w["url"]:
            return w["url"]
    g = h.cli("get", recipe, "-o", "json")
    raise AssertionError(f"no url for {unit}: {g.stdout}")


def test_get_wait_reports_progress_and_times_out(h):
    name = h.name("slow")
    (h.manifests / f"{name}.yaml").write_text(
        KEEP.format(name=name).replace("workers: 1, gpus: 1", "workers: 1, gpus: 1, args: {startup-time: 1000}"))
    h.start()
    h.wait_steps(name, {"agg_0"})
    r = h.cli("get", name, "--wait", "--timeout", "3")
    assert r.returncode == 1
    assert "waiting: " in r.stderr and "not Available after 3s" in r.stderr  # --for available, the default
    assert "agg:0/1" in r.stdout
    fast = h.name("fast")
    (h.manifests / f"{fast}.yaml").write_text(KEEP.format(name=fast))
    r = h.cli("get", fast, "--wait", "--timeout", "60")
    assert r.returncode == 0, r.stderr
    assert "Ready" in r.stdout and "agg:1/1" in r.stdout


@pytest.mark.slurm
def test_a_launch_slurm_rejects_is_reported_not_hidden(tmp_path):
    h = Harness(tmp_path, "slurm")
    try:
        name = h.name("reject")
        (h.manifests / f"{name}.yaml").write_text(
            KEEP.format(name=name) + "srun_options: {constraint: no-such-feature}\n")
        h.start()
        wait_until(lambda: "LaunchFailed" in (h.state / "events.jsonl").read_text(), timeout=30,
                   what="a LaunchFailed event")
        ev = [json.loads(l) for l in (h.state / "events.jsonl").read_text().splitlines()]
        failed = [e for e in ev if e["kind"] == "LaunchFailed"]
        assert failed[0]["recipe"] == name and failed[0]["message"].startswith("agg_0 rank 0: launcher exited")
        assert h.get(name)["status"] == "Progressing"
    finally:
        h.cleanup()


def test_rollout_without_surge_replaces_one_at_a_time_and_is_not_a_restart(h):
    name = h.name("roll")
    f = h.manifests / f"{name}.yaml"
    text = KEEP.format(name=name).replace("workers: 1, gpus: 1", "workers: 2, gpus: 1") + \
        "reconcile: {rollout: {max_surge: 0, max_unavailable: 1}}\n"
    f.write_text(text)
    h.start()
    before = h.wait_steps(name, {"agg_0", "agg_1"})
    h.wait_ready(name)
    f.write_text(text.replace("speedup_ratio: 100", "speedup_ratio: 50"))
    wait_until(lambda: all(h.steps(name).get(u, before[u]) != before[u] for u in before) and len(h.steps(name)) == 2,
               timeout=60, what="both workers replaced")
    g = h.wait_ready(name)
    assert g["restarts"] == 0
    cancels = [json.loads(l) for l in (h.state / "events.jsonl").read_text().splitlines()
               if '"CancelStep"' in l and name in l]
    assert [c["message"].split("(")[1].split(":")[0] for c in cancels] == [f"{name}/agg_0", f"{name}/agg_1"]


def test_a_frontend_change_rolls_the_router_which_keeps_its_port(h):
    name = h.name("fero")
    f = h.manifests / f"{name}.yaml"
    text = KEEP.format(name=name).replace("frontend: {type: none}", "frontend: {type: builtin, args: {poll-interval: 0.25}}")
    f.write_text(text)
    h.start()
    before = h.wait_steps(name, {"agg_0", "frontend_0"})
    g = h.wait_ready(name)
    endpoint = g["endpoint"]
    assert endpoint
    # Ready is the workers' state; the router reads the endpoints file on its next poll (0.25 s)
    wait_until(lambda: post(endpoint + "/v1/completions", {"prompt": "x", "max_tokens": 2})[0] == 200,
               timeout=10, what="the router serves")
    f.write_text(text.replace("poll-interval: 0.25", "poll-interval: 0.2"))
    wait_until(lambda: h.steps(name).get("frontend_0", before["frontend_0"]) != before["frontend_0"], timeout=60,
               what="router replaced")
    g = h.wait_ready(name)
    assert g["endpoint"] == endpoint and g["restarts"] == 0
    assert h.steps(name)["agg_0"] == before["agg_0"]  # the workers are untouched
    wait_until(lambda: post(endpoint + "/v1/completions", {"prompt": "x", "max_tokens": 2})[0] == 200,
               what="the same endpoint serves again")


def test_two_reconcilers_with_the_same_recipe_names_leave_each_other_alone(h, tmp_path_factory):
    other = Harness(tmp_path_factory.mktemp("other"), h.driver)
    try:
        name = h.name("shared-name")
        other.names.append(name)
        for harness in (h, other):
            (harness.manifests / f"{name}.yaml").write_text(KEEP.format(name=name))
            harness.start()
        mine = h.wait_steps(name, {"agg_0"})
        theirs = other.wait_steps(name, {"agg_0"})
        assert mine != theirs
        # one of them drops the recipe: only its own workload goes
        (h.manifests / f"{name}.yaml").unlink()
        (h.manifests / "keep.yaml").write_text(KEEP.format(name=h.name("keep")))
        # teardown is steps, then the allocation: idle only counts once both are gone
        wait_until(lambda: not h.steps(name) and not h.jobs(name), timeout=30, what="my copy cancelled")
        h.idle(name)
        other.idle(name)
        assert other.steps(name) == theirs
        assert "recipe deleted" not in other.log()
    finally:
        other.cleanup()


def test_a_recipe_that_runs_out_of_ports_is_held_and_keeps_running(h):
    lo = int(h.env["RECONCILER_PORT_RANGE"].split("-")[0])
    # one port (LO included, HI not): the running worker's (agg_0#http), so every added worker runs
    # out. With room for one more, the edit's added workers (an allocation each) could start a tick
    # apart on Slurm: the first took the room and was launched before the second ran out and held
    # the recipe (three CI runs, 2026-12-05..07): a partial add, held there, as designed
    h.env["RECONCILER_PORT_RANGE"] = f"{lo}-{lo + 1}"
    name = h.name("ports")
    f = h.manifests / f"{name}.yaml"
    f.write_text(KEEP.format(name=name))
    h.start()
    running = h.wait_steps(name, {"agg_0"})
    f.write_text(KEEP.format(name=name).replace("workers: 1", "workers: 3"))
    wait_until(lambda: h.get(name)["status"] == "Error", timeout=20, what="status Error")
    assert "PortsExhausted" in h.get(name)["error"]
    h.idle(name)
    assert h.steps(name) == running  # held: nothing added, nothing torn down
    assert "Held" in (h.state / "events.jsonl").read_text()


def _state_bytes(root: Path) -> dict[str, bytes]:
    """Every file under state/ but the output of the processes we start (the workers' logs/, the
    gateway's and its holder's *.log: written by them, whenever they have something to say)."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and "logs" not in p.relative_to(root).parts and p.suffix != ".log"}


def test_get_and_plan_write_nothing_and_need_no_lock(h):
    name = h.name("ro")
    f = h.manifests / f"{name}.yaml"
    f.write_text(DISAGG.format(name=name, decode=1))
    h.start()
    h.wait_ready(name)
    assert h.stop() == 0
    f.write_text(DISAGG.format(name=name, decode=2))  # something to do: plan has actions, get shows progress
    lock = h.state / "run.lock"
    import fcntl

    with open(lock, "a+") as held:  # another reconciler holds the lock: get and plan must not care
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        before = _state_bytes(h.state)
        for args in (("get",), ("get", name, "-o", "json"), ("plan",), ("plan", "-o", "json")):
            r = h.cli(*args)
            assert r.returncode in (0, 2), (args, r.stderr)
            assert _state_bytes(h.state) == before, f"reconciler {' '.join(args)} wrote to state/"

    def planned() -> tuple:
        # plan probes the workers itself (no run is running): on a loaded host one probe may time
        # out, and decode_0 reads not ready for that look; it is Ready, so a later look says so
        r = h.cli("plan", "-o", "json")
        rp = json.loads(r.stdout)["recipes"][name]
        return (r, rp) if rp["counts"]["decode"]["ready"] == 1 else None

    r, rp = wait_until(planned, timeout=scaled(60), interval=1, what="plan seeing decode_0 Ready")
    assert r.returncode == 2 and rp["counts"]["decode"] == {"desired": 2, "running": 1, "ready": 1, "unavailable": 1}
    # the running job keeps what it was packed for (prefill_0, decode_0): the added worker waits for
    # a job of its own (desired/baseline.py), nothing that runs moves
    assert rp["place"] == [] and rp["waiting"]["decode_1"]["reason"] == "ALLOCATION_PENDING", rp
    (submit,) = rp["submit"]
    assert "1 node(s) x 1 GPU(s)" in submit["description"], submit


def test_corrupt_state_of_one_recipe_and_a_killed_worker_of_another(h):
    good, bad = h.name("good"), h.name("bad")
    for n in (good, bad):
        (h.manifests / f"{n}.yaml").write_text(
            KEEP.format(name=n).replace("gpus: 1}", "gpus: 1, restart: {backoff_seconds: 0.5}}"))
    h.start()
    before = h.wait_steps(good, {"agg_0"})
    theirs = h.wait_steps(bad, {"agg_0"})
    h.wait_ready(good)
    h.wait_ready(bad)
    h.stop()
    for rel, junk in (("status.json", "[]"), ("launches.json", '{"agg_0": "x"}')):
        (h.state / bad / rel).write_text(junk)
    (h.state / "ports.json").write_text("{not json")
    (h.state / "files.json").write_text("[]")
    h.start()
    # a restarted controller's imports and first passes over the corrupt files: tens of seconds at load 20
    wait_until(lambda: h.ticks() >= 2, timeout=scaled(90), what="the restarted controller ticking")
    sid, _node = before["agg_0"]
    if h.driver == "slurm":
        scancel(sid)
    else:
        os.killpg(int(sid), signal.SIGKILL)
    after = wait_until(lambda: (s := h.steps(good)).get("agg_0", before["agg_0"]) != before["agg_0"] and s,
                       timeout=30, what="the healthy recipe's worker relaunched")
    assert set(after) == {"agg_0"}
    h.wait_ready(good)
    assert h.steps(bad) == theirs  # its state was rebuilt, its worker not replaced
    events = [json.loads(l) for l in (h.state / "events.jsonl").read_text().splitlines()]
    corrupt = {e["message"].split(":")[0] for e in events if e["kind"] == "CorruptState"}
    assert corrupt == {f"{bad}/status.json", f"{bad}/launches.json", "ports.json", "files.json"}
    assert json.loads((h.state / "controller.json").read_text())["tickFailures"] == 0
