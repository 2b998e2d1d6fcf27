"""Which gateways run (shell/gateway/sync.py:sync_gateways, on hand-built values): a deployment keeps its
gateway, and so its address, while its frontend is gone for a moment (its allocation requeued or
lost); the gateway stops when the recipe is deleted."""

from __future__ import annotations

from types import SimpleNamespace

from fakes import recipe
from reconciler.drivers.state import StateDir
from reconciler.shell.gateway.answering import GatewayProbe
from reconciler.shell.gateway.sync import sync_gateways

TEXT = """\
name: {name}
model: {{path: /m}}
resources: {{gpus_per_node: 8}}
engine: mocker
frontend: {{type: {fe}}}
roles: {{agg: {{workers: 1, gpus: 1}}}}
"""


class Gateways:
    def __init__(self, known):
        self._known, self.calls = list(known), []

    def known(self):
        return list(self._known)

    def sync(self, name, upstreams, ports, now, unproven=False, hold=None, listen=None, place=None, door=None,
             take_from=None, share=False):
        self.calls.append(("sync", name, tuple(upstreams)) + (("unproven",) if unproven else ()))
        return []

    def stop(self, name, ports):
        self.calls.append(("stop", name))
        return []


def snap(desired: dict, manifests: dict):
    return SimpleNamespace(
        desired=SimpleNamespace(recipes=desired, held={}), observed=SimpleNamespace(ready={}, health={},
                                                                                    previous_ready={}),
        manifests=SimpleNamespace(recipes=manifests, invalid={}, renames={}), plan=SimpleNamespace(refused_prune=False),
        ports=None, now=0.0)


def frontless(name: str):
    """A desired recipe whose head allocation is not running: no frontend unit this tick."""
    return SimpleNamespace(frontend=None, frontends=(), previous={}, suspended=False, name=name)


def test_a_gateway_outlives_its_frontend_for_a_moment_and_stops_with_its_recipe(tmp_path):
    g = Gateways(["r", "gone"])
    sync_gateways(StateDir(tmp_path), g,
                  snap({"r": frontless("r")}, {"r": recipe(TEXT.format(name="r", fe="builtin"))}), GatewayProbe())
    assert ("sync", "r", ()) in g.calls  # kept, answering 503 until a frontend is back
    assert ("stop", "r") not in g.calls and ("stop", "gone") in g.calls  # a deleted recipe's goes


def test_a_recipe_without_a_frontend_type_has_no_gateway(tmp_path):
    g = Gateways(["r"])
    sync_gateways(StateDir(tmp_path), g,
                  snap({"r": frontless("r")}, {"r": recipe(TEXT.format(name="r", fe="none"))}), GatewayProbe())
    assert g.calls == [("stop", "r")]
