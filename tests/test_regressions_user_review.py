"""Regressions from a hostile user's review of main (2026-12-05 evening): each test failed before
its fix."""

from __future__ import annotations

from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
import threading

import pytest

from harness import _ranges
from reconciler.core.ports import NodePortAllocator
from reconciler.desired.admission import load_text
from reconciler.drivers.state import StateDir
from reconciler.errors import RecipeError
from reconciler.shell.gateway.host import Gateways
from reconciler.shell.gateway.record import facts, prefix_of
from reconciler.shell.gateway.sweep import master_pid
from support.recipes import BUILTIN_ONE as RECIPE
from tests.helpers import get


# ---------------------------------------------------------------- a listen address of another host
def test_a_listen_address_of_another_host_is_refused_where_it_is_written():
    """`listen: 192.0.2.99` validated (an IP literal), then the running master was ended and the
    new one could not bind: the endpoint refused every request. It is this host's view, checked
    as the model directory is (a spec that already ran is not refused for it)."""
    text = RECIPE + "reconcile:\n  gateway: {listen: 192.0.2.99}\n"
    with pytest.raises(RecipeError) as e:
        load_text(text, "r.yaml")
    assert e.value.key == "reconcile.gateway.listen" and e.value.line == 8, e.value
    assert "not an address of this host" in str(e.value)
    assert load_text(text, "r.yaml", preflight=False).recipe.reconcile.gateway.listen == "192.0.2.99"
    with pytest.raises(RecipeError, match="multicast"):
        load_text(RECIPE + "reconcile: {gateway: {listen: 224.0.0.1}}\n", "r.yaml")


class _Ok(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - http.server's name
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *a):
        pass


@pytest.mark.needs("nginx")
def test_a_listen_change_to_an_address_of_another_host_keeps_the_running_gateway(tmp_path):
    """The shell's own guard (a last applied spec is loaded without the host check): the master
    serving now is not ended for an address nginx could never bind; GatewayFailed says why."""
    up = ThreadingHTTPServer(("127.0.0.1", 0), _Ok)
    threading.Thread(target=up.serve_forever, daemon=True).start()
    upstream = f"127.0.0.1:{up.server_address[1]}"
    g = Gateways(StateDir(tmp_path / "state"), host="127.0.0.1")
    lo = next(_ranges)
    ports = NodePortAllocator(lo, lo + 100)
    try:
        assert [c.kind for c in g.sync("r", [upstream], ports, 1.0, listen="0.0.0.0")] == ["GatewayStarted"]
        url = facts(g.state.root, "r")["url"]
        pid = master_pid(prefix_of(g.state.root, "r"))
        changes = g.sync("r", [upstream], ports, 2.0, listen="192.0.2.99")
        assert [c.kind for c in changes] == ["GatewayFailed"], changes
        assert "192.0.2.99 is not an address of this host" in changes[0].message
        assert "keeps listening on 0.0.0.0" in changes[0].message
        assert master_pid(prefix_of(g.state.root, "r")) == pid
        assert get(url + "/v1/x")[0] == 200
        assert [c.kind for c in g.sync("r", [upstream], ports, 3.0, listen="192.0.2.99")] == []  # said once
        # meanwhile its upstreams still follow the frontends (a graceful reload, the same master)
        assert [c.kind for c in g.sync("r", [], ports, 3.5, listen="192.0.2.99")] == ["GatewayReloaded"]
        assert master_pid(prefix_of(g.state.root, "r")) == pid
        # put back: nothing moves, the error is taken back
        assert [c.kind for c in g.sync("r", [upstream], ports, 4.0, listen="0.0.0.0")] == ["GatewayReloaded"]
        assert master_pid(prefix_of(g.state.root, "r")) == pid and not g._record("r").get("listenError")
    finally:  # the gateway quits with the test (tests/conftest.py)
        up.shutdown()


# ---------------------------------------------------------------- a deleted recipe's autoscale memory
AUTO = """\
name: {name}
model: {{path: m}}
resources: {{gpus_per_node: 8}}
engine: {{type: mocker}}
roles: {{agg: {{workers: 1, gpus: 1}}}}
frontend: {{type: none}}
reconcile:
  autoscale:
    roles:
      agg: {{min: 1, max: 3, target: {{waiting_per_worker: 8}}}}
"""


def test_a_recipe_made_again_does_not_inherit_the_deleted_ones_autoscale_memory(tmp_path, monkeypatch):
    """Deleted, then copied back 12 s later: the new deployment was scaled to zero 5 s after its
    worker was Ready ("no request for 21s", counted from the old one's last request), and an old
    scaled-up count would have come back the same way (state/<name>/autoscale.json stayed)."""
    import json

    import reconciler.shell.observe as observe
    from reconciler.drivers.memory import MemoryDriver
    from reconciler.shell.loop import Controller

    monkeypatch.setattr(observe, "probe_units", lambda units, **kw: {u.key: True for u in units})
    m = tmp_path / "manifests"
    m.mkdir()
    (m / "keep.yaml").write_text(AUTO.format(name="keep"))
    f = m / "r.yaml"
    f.write_text(AUTO.format(name="r"))
    c = Controller(m, tmp_path / "state", MemoryDriver(host="node0"))
    c.debounce = 0
    for _ in range(3):
        c.tick()
    memory = tmp_path / "state" / "r" / "autoscale.json"
    memory.write_text(json.dumps({"roles": {"agg": {"built": 3, "target": 3, "since": 0.0}}}))

    def agg() -> int:
        d = c.snapshot().desired.recipes["r"]
        return len({(u.role, u.index) for u in d.all_units if u.role == "agg"} | {w for w in d.waiting if w[0] == "agg"})

    c.tick()
    assert agg() == 3  # the memory is what the build uses
    f.unlink()
    status = tmp_path / "state" / "r" / "status.json"
    for _ in range(20):
        c.tick()
        if json.loads(status.read_text()).get("phase") == "Deleted":
            break
    assert json.loads(status.read_text()).get("phase") == "Deleted"
    assert not memory.exists(), "the deleted recipe's autoscale memory stayed"
    f.write_text(AUTO.format(name="r"))
    c.tick()
    assert agg() == 1  # the file's workers, afresh


# ---------------------------------------------------------------- get's REASON for the endpoint's path
def _st(ready_reason: str, ready: bool = False, worker_reason: str | None = None, extra: tuple = (),
        worker_ready: bool = True) -> dict:
    conds = [{"type": "Ready", "status": "True" if ready else "False", "reason": ready_reason, "message": "m-ready"},
             *extra]
    return {"conditions": conds, "workers": [
        {"name": "agg_0", "role": "agg", "ready": worker_ready, "reason": worker_reason, "message": "m-worker"},
        {"name": "frontend_0", "role": "frontend", "ready": False, "reason": None, "message": None}]}


@pytest.mark.parametrize("st, want", [
    (_st("AllReady", ready=True), (None, None)),
    # describe said GatewayDown with nginx's error; get's REASON column said "-"
    (_st("GatewayDown"), ("GatewayDown", "m-ready")),
    (_st("GatewayNotRouting"), ("GatewayNotRouting", "m-ready")),
    (_st("FrontendNotAnswering"), ("FrontendNotAnswering", "m-ready")),
    (_st("NotReady"), (None, None)),  # starting: nothing has failed
    # a worker still starting is why: the frontends' canary fails for it too
    (_st("FrontendNotAnswering", worker_ready=False), (None, None)),
    # a worker that fails says more than the gateway that has nothing to route to
    (_st("GatewayDown", worker_reason="CrashLoop", worker_ready=False), ("CrashLoop", "agg_0: m-worker")),
    # a refused rollout comes first
    (_st("GatewayDown", worker_reason="CrashLoop", worker_ready=False, extra=(
        {"type": "Progressing", "status": "False", "reason": "RolloutFailed", "message": "m-rollout"},)),
     ("RolloutFailed", "m-rollout")),
])
def test_gets_reason_names_what_keeps_the_endpoint_from_answering(st, want):
    from reconciler.shell.reasons import deployment_reason

    assert deployment_reason(st) == want


# ---------------------------------------------------------------- what the holder says when nothing comes
def test_the_holder_says_suspended_or_deleted_not_that_a_frontend_is_starting(tmp_path):
    """A request held while the deployment was suspended at zero heard "scaled to zero: a held
    request brings a worker back", and one held when its recipe was deleted "no frontend answers:
    one is being started or moved": nothing was coming in either case."""
    import json

    from reconciler.shell.gateway import holder_supervisor
    from tests.helpers import post

    prefix = (tmp_path / "state" / "r" / "gateway").absolute()
    port = next(_ranges)
    pid, did = holder_supervisor.ensure(prefix, holder_supervisor.argv(holder_supervisor.python(), "r", port, port + 1, 1.0, prefix), port)
    try:
        assert pid is not None and holder_supervisor.wait_listening(port), did
        holder_supervisor.write_wake(prefix, None, "scaled to zero: a held request brings a worker back")
        holder_supervisor.say_nothing_comes(prefix, holder_supervisor.SUSPENDED)
        status, body = post(f"http://127.0.0.1:{port}/v1/completions", {"prompt": "x"})
        assert status == 503 and json.loads(body)["error"]["reason"] == holder_supervisor.SUSPENDED, body
        holder_supervisor.say_nothing_comes(prefix, None)  # resumed: the word is taken back
        assert not (prefix / "wake.json").exists()
        holder_supervisor.write_wake(prefix, None, "a worker is starting")
        holder_supervisor.say_nothing_comes(prefix, None)  # the autoscaler's own word is not taken back
        assert json.loads((prefix / "wake.json").read_text())["why"] == "a worker is starting"
        holder_supervisor.say_nothing_comes(prefix, holder_supervisor.DELETED)
        status, body = post(f"http://127.0.0.1:{port}/v1/completions", {"prompt": "x"})
        assert status == 503 and json.loads(body)["error"]["reason"] == holder_supervisor.DELETED, body
    finally:
        holder_supervisor.stop(prefix)


@pytest.mark.parametrize("change, where", [
    (("workers: 1, gpus: 1", "workers: true, gpus: 1"), "roles.agg.workers"),
    (("workers: 1, gpus: 1", "workers: 1, gpus: yes"), "roles.agg.gpus"),
    (("{gpus_per_node: 8}", "{gpus_per_node: true}"), "resources.gpus_per_node"),
    # a number or a word: false had been 0 nodes (colocate), true 1
    (("workers: 1, gpus: 1", "workers: 1, gpus: 1, nodes: false"), "roles.agg.nodes"),
])
def test_a_boolean_is_not_taken_for_a_number(change, where):
    with pytest.raises(RecipeError) as e:
        load_text(RECIPE.replace(*change), "r.yaml")
    assert where in str(e.value) and "expected a number, found the boolean" in str(e.value), str(e.value)


def test_the_drain_clock_starts_when_an_edit_changes_the_counts(tmp_path):
    """The scale-down drain runs from the edit that lowered a count: a restarted reconciler finds it
    in last-applied.yaml's time; an edit that changes no count (a comment, a tool stamping the
    file) and an invalid save leave it as it was (else its victims could be kept forever, or cut
    off at once)."""
    import os

    from reconciler.shell.manifests import Manifests, applied_since

    def m(**texts: str) -> Manifests:
        return Manifests(recipes={n: load_text(t, f"{n}.yaml").recipe for n, t in texts.items()}, texts=dict(texts))

    r3 = RECIPE.replace("workers: 1", "workers: 3")
    r1 = RECIPE
    state = StateDir(tmp_path)
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "last-applied.yaml").write_text(r3)
    os.utime(tmp_path / "r" / "last-applied.yaml", (50.0, 50.0))
    seen: dict = {}
    s = RECIPE.replace("name: r", "name: s")
    assert applied_since(state, m(r=r3, s=s), seen, 100.0) == {"r": 50.0, "s": 100.0}
    assert applied_since(state, m(r=r3 + "# stamped\n", s=s), seen, 110.0) == {"r": 50.0, "s": 100.0}
    assert applied_since(state, m(r=r1, s=s), seen, 120.0) == {"r": 120.0, "s": 100.0}  # 3 -> 1
    invalid = Manifests(recipes={"r": load_text(r1, "r.yaml").recipe}, texts={})  # an invalid save: last spec
    assert applied_since(state, invalid, seen, 121.0) == {"r": 120.0}
    assert applied_since(state, m(r=r1), seen, 130.0) == {"r": 120.0} and "s" not in seen
