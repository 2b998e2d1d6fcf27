"""Folders are namespaces, on the real Slurm (and the local driver): a deployment at the top level
keeps running untouched when the reconciler restarts with namespaces in use (an upgrade), and
the same name in a folder is a second deployment with its own job, steps and state."""

from __future__ import annotations

import json

import pytest

from harness import Harness
from support.clusters import old_checkout  # noqa: F401 - fixtures among them
from helpers import wait_until
from reconciler.recipe import namespaces

KEEP = """\
name: {name}
model: {{path: m}}
resources: {{gpus_per_node: 8}}
engine: {{type: mocker, speedup_ratio: 100}}
roles: {{agg: {{workers: {w}, gpus: 1}}}}
frontend: {{type: none}}
"""


@pytest.fixture(params=[pytest.param("slurm", marks=pytest.mark.slurm), "local"])
def h(request, tmp_path):
    harness = Harness(tmp_path, request.param)
    yield harness
    for f in harness.manifests.rglob("*.yaml"):
        if f.parent != harness.manifests:
            f.unlink()  # the harness removes the top-level files
    harness.cleanup()


def _launches(h, name: str) -> dict[str, int]:
    """unit -> how many lives the reconciler launched for it (state/<name>/launches.json)."""
    return {u: r["launches"] for u, r in json.loads((h.state / name / "launches.json").read_text()).items()}


def _launch_events(h, name: str) -> list[tuple[str, str]]:
    lines = (h.state / "events.jsonl").read_text().splitlines()
    return [(e["time"], e["message"]) for e in map(json.loads, lines) if e["recipe"] == name and e["kind"] == "LaunchStep"]


def test_top_level_keeps_running_and_a_folder_adds_a_second_deployment_of_the_same_name(h):
    name = h.name("ns")
    (h.manifests / f"{name}.yaml").write_text(KEEP.format(name=name, w=1))
    h.start()
    h.wait_ready(name)
    before = h.steps(name)
    h.kill9()  # the reconciler goes away; what it started keeps running
    # what the first reconciler launched, however many lives that took (a worker that exits while it
    # starts, on a loaded host, is relaunched: not this test's business); the restart adds none
    launched = _launches(h, name)
    team = h.manifests / "teamA"
    team.mkdir()
    (team / f"{name}.yaml").write_text(KEEP.format(name=name, w=2))
    key = namespaces.key("teamA", name)
    h.names.append(key)  # cleanup cancels its jobs by name too
    h.start()
    h.wait_steps(key, {"agg_0", "agg_1"})
    wait_until(lambda: h.get(f"teamA/{name}")["status"] == "Ready", timeout=60,
               what=f"teamA/{name} Ready (reconciler log:\n{h.log()[-3000:]})")
    assert h.steps(name) == before, "the top-level deployment was relaunched"
    assert h.jobs(key) and set(h.jobs(key)).isdisjoint(h.jobs(name))  # an allocation of its own
    assert _launches(h, name) == launched, (launched, _launch_events(h, name))
    assert (h.state / key / "status.json").is_file()
    row = h.get(f"teamA/{name}")
    assert (row["namespace"], row["name"]) == ("teamA", name)
    h.idle(name)  # and it stays untouched


@pytest.mark.slurm
def test_an_upgrade_to_namespaces_adopts_the_top_level_and_adds_the_folder(tmp_path, old_checkout):
    """The release before (tests/test_upgrade.py's) deploys a top-level recipe; the current one
    starts with a folder holding the same name: the top-level steps are adopted untouched (no
    launch, no cancel), the folder's deployment starts beside them."""
    h = Harness(tmp_path, "slurm")
    try:
        name = h.name("nsupg")
        (h.manifests / f"{name}.yaml").write_text(KEEP.format(name=name, w=2))
        new_env = h.env
        h.env = {**new_env, "PYTHONPATH": str(old_checkout)}
        h.start()
        h.wait_ready(name, timeout=90)
        before = h.steps(name)
        assert h.stop() == 0
        acted = len(h.actions(name))
        (h.manifests / "teamA").mkdir()
        (h.manifests / "teamA" / f"{name}.yaml").write_text(KEEP.format(name=name, w=1))
        key = namespaces.key("teamA", name)
        h.names.append(key)
        h.env = new_env
        h.start()
        h.wait_steps(key, {"agg_0"}, timeout=90)
        start = h.ticks()
        wait_until(lambda: h.ticks() >= start + 5, timeout=60, what="5 ticks of the upgraded reconciler")
        assert h.actions(name)[acted:] == [], "the upgrade launched or cancelled something at the top level"
        assert h.steps(name) == before
        assert h.get(name)["status"] == "Ready"
    finally:
        h.stop()
        for f in h.manifests.rglob("*.yaml"):
            if f.parent != h.manifests:
                f.unlink()
        h.cleanup()
