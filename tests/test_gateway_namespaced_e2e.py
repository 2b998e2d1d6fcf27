"""A namespaced recipe gets its gateway (issue 48, item 4), on the real Slurm with the real nginx.

A recipe in a folder has the key ``team-a@NAME`` (recipe/namespaces.py); the gateway refused it
every pass ("a recipe name with characters nginx would read as syntax"), so the endpoint `get`
printed for ``team-a/NAME`` never answered.
"""

from __future__ import annotations

import json

import pytest

from harness import Harness
from helpers import post, wait_until
from reconciler.recipe import namespaces
from reconciler.shell.gateway.record import prefix_of
from reconciler.shell.gateway.sweep import master_pid

pytestmark = [pytest.mark.slurm, pytest.mark.needs("nginx")]

RECIPE = """\
schema: 2
name: {name}
model: {{path: m}}
resources: {{gpus_per_node: 8}}
engine: {{type: mocker, speedup_ratio: 100}}
roles: {{agg: {{workers: 1, gpus: 1}}}}
frontend: {{type: builtin, args: {{poll-interval: 0.25}}}}
"""
CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


@pytest.fixture
def h(tmp_path):
    harness = Harness(tmp_path, "slurm")
    yield harness
    for f in harness.manifests.rglob("*.yaml"):
        f.unlink()  # the harness removes only the top-level files
    harness.cleanup()


def _serves(url: str) -> bool:
    return post(url + "/v1/chat/completions", CHAT, timeout=10)[0] == 200


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
