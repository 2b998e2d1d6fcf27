"""Folders are namespaces, on the real Slurm (and the local driver): a deployment at the top level
keeps running untouched when the reconciler restarts with namespaces in use (an upgrade), and
the same name in a folder is a second deployment with its own job, steps and state."""

from __future__ import annotations

import json

import pytest

from harness import Harness
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


def test_top_level_keeps_running_and_a_folder_adds_a_second_deployment_of_the_same_name(h):
    name = h.name("ns")
    (h.manifests / f"{name}.yaml").write_text(KEEP.format(name=name, w=1))
    h.start()
    h.wait_ready(name)
    before = h.steps(name)
    h.kill9()  # the reconciler goes away; what it started keeps running
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
    launches = json.loads((h.state / name / "launches.json").read_text())
    assert all(r["launches"] == 1 for r in launches.values()), launches
    assert (h.state / key / "status.json").is_file()
    row = h.get(f"teamA/{name}")
    assert (row["namespace"], row["name"]) == ("teamA", name)
    h.idle(name)  # and it stays untouched
