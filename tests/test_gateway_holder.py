"""The gateway's holder (scale to zero) on its own: the rendered config, then a real nginx, the real
holder process and a real mocker — a request that comes with no frontend is held, counted, and
streamed from the frontend once the gateway lists one; one held past the timeout gets a 503 JSON
with the expected wait and Retry-After; the holder goes with its recipe's opt-out."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from reconciler.gateway import GatewayConfig, render
from reconciler.shell.gateway import holder_supervisor
from reconciler.shell.gateway.record import facts, prefix_of
from tests.helpers import post, start_mocker, wait_until
from support.gateways import _hp, _ports, Call, CHAT, gw  # noqa: F401 - fixtures among them

needs_nginx = pytest.mark.needs("nginx")


def test_render_holds_with_no_frontend_and_backs_the_frontends_up():
    alone = render(GatewayConfig("r1", 20001, Path("/s/g"), (), holder=20002))
    assert "server 127.0.0.1:20002;" in alone and "proxy_pass http://frontends;" in alone
    assert "no Ready frontend" not in alone and "backup" not in alone
    two = render(GatewayConfig("r1", 20001, Path("/s/g"), ("a:1", "b:2"), holder=20002))
    assert "server 127.0.0.1:20002 backup;" in two and "proxy_next_upstream_tries 4;" in two
    assert "server 127.0.0.1:20002" not in render(GatewayConfig("r1", 20001, Path("/s/g"), ("a:1",)))
    with pytest.raises(ValueError, match="holder port"):
        render(GatewayConfig("r1", 20001, Path("/s/g"), (), holder=70000))


@needs_nginx
def test_a_request_is_held_until_a_frontend_is_listed_then_streamed(gw, tmp_path):  # noqa: F811
    m, m_url = start_mocker(tmp_path, "--speedup-ratio", "10", name="fe")
    prefix = prefix_of(gw.state.root, "r1")
    try:
        ports = _ports()
        kinds = [c.kind for c in gw.sync("r1", [], ports, 1000.0, hold=60)]
        assert kinds == ["GatewayHolder", "GatewayStarted"], kinds
        port = gw._record("r1")["holderPort"]
        assert holder_supervisor.wait_listening(port)  # started, not waited for: the tick serves every deployment
        url = facts(gw.state.root, "r1")["url"]
        call = Call(url, max_tokens=20)
        call.start()
        wait_until(lambda: (holder_supervisor.stats(port) or {}).get("held") == 1, what="the request held by the holder")
        assert call.status is None
        assert gw.sync("r1", [], ports, 1001.0, hold=60) == []  # the same holder is kept (adopted)
        # a frontend is Ready: the reload lists it, the holder sends the held request to it
        assert [c.kind for c in gw.sync("r1", [_hp(m_url)], ports, 1002.0, hold=60)] == ["GatewayReloaded"]
        call.join(60)
        assert call.status == 200 and call.body.rstrip().endswith(b"data: [DONE]"), (call.status, call.body[-200:])
        s = holder_supervisor.stats(port)
        assert (s["held"], s["received"], s["forwarded"], s["timedOut"]) == (0, 1, 1, 0), s
        # with a frontend, requests go to it and not to the holder
        assert post(url + "/v1/chat/completions", CHAT)[0] == 200 and holder_supervisor.stats(port)["received"] == 1
    finally:
        m.stop()
        holder_supervisor.stop(prefix)


@needs_nginx
def test_a_request_held_past_the_timeout_gets_a_503_with_the_expected_wait(gw, tmp_path):  # noqa: F811
    prefix = prefix_of(gw.state.root, "r1")
    try:
        ports = _ports()
        gw.sync("r1", [], ports, 1000.0, hold=2)
        assert holder_supervisor.wait_listening(gw._record("r1")["holderPort"])
        url = facts(gw.state.root, "r1")["url"]
        holder_supervisor.write_wake(prefix, time.time() + 40, "agg_0 waits for its allocation: expected start in 30s")
        call = Call(url)
        call.run()
        assert call.status == 503, (call.status, call.body)
        err = json.loads(call.body)["error"]
        assert err["type"] == "service_unavailable" and "agg_0 waits for its allocation" in err["message"], err
        assert "hold of 2s" in err["message"] and "expected start in 30s" in err["reason"], err
        assert 30 <= err["expected_wait_seconds"] <= 40 and int(call.headers["Retry-After"]) == err["expected_wait_seconds"]
        port = gw._record("r1")["holderPort"]
        assert holder_supervisor.stats(port)["timedOut"] == 1
        # no expected time known: the hold period is the advice
        (prefix / "wake.json").unlink()
        call = Call(url)
        call.run()
        assert call.status == 503 and call.headers["Retry-After"] == "2"
        assert json.loads(call.body)["error"]["expected_wait_seconds"] is None
        # the recipe holds no request (hold_seconds: 0): the holder goes, the gateway answers 503 at once
        kinds = [c.kind for c in gw.sync("r1", [], ports, 1001.0, hold=None)]
        assert kinds == ["GatewayHolderStopped", "GatewayReloaded"], kinds
        assert holder_supervisor.running(prefix) is None and holder_supervisor.stats(port) is None
        status, body = post(url + "/v1/chat/completions", CHAT)
        assert status == 503 and b"no Ready frontend" in body
    finally:
        holder_supervisor.stop(prefix)


@needs_nginx
def test_a_new_hold_timeout_keeps_the_holder_and_stop_ends_it(gw, tmp_path):  # noqa: F811
    """An edit of the hold is read by the running holder (hold.json), which is not replaced: what it
    relays goes on (a replaced holder cut its streams: found in review)."""
    prefix = prefix_of(gw.state.root, "r1")
    try:
        ports = _ports()
        gw.sync("r1", [], ports, 1000.0, hold=5)
        first = holder_supervisor.running(prefix)[0]
        changes = gw.sync("r1", [], ports, 1001.0, hold=9)
        assert [c.kind for c in changes] == ["GatewayHolder"] and "now wait up to 9s" in changes[0].message, changes
        assert holder_supervisor.running(prefix)[0] == first
        assert json.loads((prefix / "hold.json").read_text()) == {"timeout": 9}
        assert gw.sync("r1", [], ports, 1002.0, hold=9) == []
        gw.stop("r1", ports)
        assert holder_supervisor.running(prefix) is None
    finally:
        holder_supervisor.stop(prefix)


def test_the_holders_port_skips_one_taken_and_keeps_the_gateways(tmp_path):
    """A port of the range held by a process of someone else's is skipped (and blocked), not tried
    64 times over (the allocator hands the same key the same port): found by the benchmark."""
    import socket

    from reconciler.core.ports import NodePortAllocator
    from harness import _ranges

    lo = next(_ranges)  # this test worker's own span: an ephemeral port's neighbour may be anyone's
    ports = NodePortAllocator(lo, lo + 50)
    assert ports.allocate("h", "r/gateway", "http") == lo
    taken = socket.socket()
    # as any server binds (nginx, aiohttp): a connection of an earlier test's server on this port
    # may still be in TIME_WAIT (this worker's ranges come round again within its 60 s)
    taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        taken.bind(("127.0.0.1", lo + 1))
        taken.listen()
        port = holder_supervisor.port_of({}, "r", {"h", "localhost"}, ports, "h")
        assert port not in (lo, lo + 1) and ports.lookup("h", "r/gateway", "http") == lo
        assert ports.lookup("localhost", "r/gateway", "holder") == port
        assert holder_supervisor.port_of({"holderPort": port}, "r", {"h"}, ports, "h") == port  # kept ever after
    finally:
        taken.close()


@needs_nginx
def test_a_request_every_frontend_failed_is_held_by_the_backup_holder(gw, tmp_path):  # noqa: F811
    """The moment of a drain to zero: the one frontend left answers 503 (its router has no worker).
    nginx passes the request to the holder (backup), which keeps trying the listed frontend (a 503
    before any byte: nothing reached the client) until the gateway lists one that serves."""
    from support.gateways import _Drops

    busy = _Drops(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
    busy.start()
    m, m_url = start_mocker(tmp_path, "--speedup-ratio", "10", name="fe")
    prefix = prefix_of(gw.state.root, "r1")
    try:
        ports = _ports()
        gw.sync("r1", [busy.addr], ports, 1000.0, hold=60)
        port = gw._record("r1")["holderPort"]
        assert holder_supervisor.wait_listening(port)
        url = facts(gw.state.root, "r1")["url"]
        call = Call(url)
        call.start()
        wait_until(lambda: (holder_supervisor.stats(port) or {}).get("held") == 1 and busy.seen >= 3,
                   what="held by the backup holder, which keeps trying the 503 frontend")
        assert call.status is None
        gw.sync("r1", [_hp(m_url)], ports, 1001.0, hold=60)
        call.join(60)
        assert call.status == 200 and call.body.rstrip().endswith(b"data: [DONE]"), (call.status, call.body[-200:])
        assert holder_supervisor.stats(port)["forwarded"] == 1
    finally:
        busy.sock.close()
        m.stop()
        holder_supervisor.stop(prefix)
