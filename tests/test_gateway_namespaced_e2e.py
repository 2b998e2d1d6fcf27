"""A namespaced recipe gets its gateway (issue 48, item 4), on the real Slurm with the real nginx.

A recipe in a folder has the key ``team-a@NAME`` (recipe/namespaces.py); the gateway refused it
every pass ("a recipe name with characters nginx would read as syntax"), so the endpoint `get`
printed for ``team-a/NAME`` never answered.
"""

from __future__ import annotations

import json

import pytest

from harness import Harness
from helpers import wait_until
from reconciler.recipe import namespaces
from reconciler.shell.gateway.record import prefix_of
from reconciler.shell.gateway.sweep import master_pid
from support.gateways import _serves
from support.recipes import GATEWAYED as RECIPE

pytestmark = [pytest.mark.slurm, pytest.mark.needs("nginx")]


@pytest.fixture
def h(tmp_path):
    harness = Harness(tmp_path, "slurm")
    yield harness
    for f in harness.manifests.rglob("*.yaml"):
        f.unlink()  # the harness removes only the top-level files
    harness.cleanup()


def test_team_a_hello_is_served_through_its_gateway(h):
    name = h.name("hello")
    (h.manifests / "team-a").mkdir()
    (h.manifests / "team-a" / f"{name}.yaml").write_text(RECIPE.format(name=name))
    key = namespaces.key("team-a", name)
    h.names.append(key)  # cleanup cancels its jobs by name too
    h.start()
    g = h.wait_ready(f"team-a/{name}", timeout=90)
    gw = json.loads((h.state / key / "gateway.json").read_text())
    endpoint = f"http://{gw['host']}:{gw['port']}"
    assert g["endpoint"] == endpoint  # what `get team-a/NAME` prints is the gateway
    wait_until(lambda: _serves(endpoint), timeout=30, what="a completion through team-a's gateway")
    assert master_pid(prefix_of(h.state, key)) is not None
    assert "nginx would read as syntax" not in h.log()
