"""The gateway's front door (issue 48, item 6) with the real nginx, the real holder process and a
real mocker frontend: API keys checked by nginx (``auth_request`` to the holder) before anything is
proxied or held; only OpenAI paths passed on (``/holder/stats``, ``/metrics``, ``/favicon.ico`` are
nginx's own 404: nothing is held, nothing woken); the holder's caps on what it keeps (503 with
Retry-After beyond). The same on the real Slurm: tests/test_gateway_front_door_e2e.py."""

from __future__ import annotations

import http.client
import json
from pathlib import Path

import pytest

from reconciler.gateway import GatewayConfig, render
from reconciler.gateway.keys import KeysError, line_for, parse
from reconciler.shell.gateway import holder_supervisor
from reconciler.shell.gateway.record import facts, prefix_of
from tests.helpers import start_mocker, wait_until
from support.gateways import _hp, _ports, CHAT, Bg, call, gw  # noqa: F401 - fixtures among them

needs_nginx = pytest.mark.needs("nginx")
KEY = "sk-front-door-test-key-0001"


def door(tmp_path: Path, *keys: str, max_held: int = 1024, max_held_mb: int = 256) -> dict:
    f = tmp_path / "keys"
    f.write_text("# test keys\n" + "".join(line_for(k, f"k{i}") + "\n" for i, k in enumerate(keys)))
    return holder_supervisor.front_door(str(f) if keys else None, max_held, max_held_mb)


def test_keys_file_lines_are_parsed_and_bad_ones_located():
    line = line_for(KEY, "alice")
    assert line.startswith("sha256:") and line.endswith(" alice")
    assert parse(f"# c\n\n{line}\n", "f") == {line[7:71]: "alice"}
    with pytest.raises(KeysError, match=r"f line 2: expected 'sha256:<64"):
        parse(f"{line}\nsk-a-plain-key\n", "f")
    with pytest.raises(KeysError, match="at least 16"):
        line_for("short")


def test_render_checks_keys_before_proxying_and_passes_openai_paths_only():
    text = render(GatewayConfig("r1", 20001, Path("/s/g"), ("a:1",), holder=20002, auth=20002))
    assert text.count("auth_request /_gateway/auth;") == 2  # /v1/ and /health
    assert "proxy_pass http://127.0.0.1:20002/holder/auth;" in text and "internal;" in text
    assert "location /v1/ {" in text and "location = /health {" in text and "return 404" in text
    assert "auth_request" not in render(GatewayConfig("r1", 20001, Path("/s/g"), ("a:1",), holder=20002))


@needs_nginx
def test_a_request_without_a_valid_key_gets_401_and_one_with_it_200(gw, tmp_path):  # noqa: F811
    m, m_url = start_mocker(tmp_path, "--speedup-ratio", "10", name="fe")
    prefix = prefix_of(gw.state.root, "r1")
    try:
        ports = _ports()
        d = door(tmp_path, KEY)
        gw.sync("r1", [_hp(m_url)], ports, 1000.0, hold=None, door=d)  # keys alone run the holder
        assert holder_supervisor.wait_listening(gw._record("r1")["holderPort"])
        url = facts(gw.state.root, "r1")["url"]
        st, hdrs, body = call(url)
        assert st == 401 and json.loads(body)["error"]["type"] == "authentication_error", (st, body)
        assert hdrs.get("WWW-Authenticate", "").startswith("Bearer"), hdrs
        assert call(url, key="sk-not-a-key-of-this-file")[0] == 401
        assert call(url, "/health")[0] == 401
        assert call(url, key=KEY)[0] == 200
        assert call(url, "/v1/models", key=KEY, method="GET")[0] == 200
        # a key added to the file is taken at once: no restart, no reload
        other = "sk-front-door-test-key-0002"
        (tmp_path / "keys").write_text((tmp_path / "keys").read_text() + line_for(other) + "\n")
        assert call(url, key=other)[0] == 200
        # a file that cannot be read admits nobody (closed, never open), and the reconciler says why
        (tmp_path / "keys").write_text("not a key line\n")
        assert call(url, key=KEY)[0] == 401
        said = [c for c in gw.sync("r1", [_hp(m_url)], ports, 1001.0, hold=None, door=d) if c.kind == "GatewayFailed"]
        assert said and "line 1" in said[0].message, said
    finally:
        m.stop()
        holder_supervisor.stop(prefix)


@needs_nginx
def test_an_unauthenticated_request_at_zero_is_never_held(gw, tmp_path):  # noqa: F811
    prefix = prefix_of(gw.state.root, "r1")
    try:
        ports = _ports()
        gw.sync("r1", [], ports, 1000.0, hold=60, door=door(tmp_path, KEY))
        port = gw._record("r1")["holderPort"]
        assert holder_supervisor.wait_listening(port)
        url = facts(gw.state.root, "r1")["url"]
        for path in ("/v1/chat/completions", "/health"):
            assert call(url, path)[0] == 401
        assert call(url, "/favicon.ico", method="GET")[0] == 404
        held = Bg(url, key=KEY)
        held.start()
        wait_until(lambda: (holder_supervisor.stats(port) or {}).get("held") == 1, what="the keyed request held")
        s = holder_supervisor.stats(port)
        assert s["received"] == 1, s  # the demand the autoscaler reads: the keyed request alone
    finally:
        holder_supervisor.stop(prefix)


@needs_nginx
def test_internal_pages_are_not_served_through_the_gateway(gw, tmp_path):  # noqa: F811
    m, m_url = start_mocker(tmp_path, "--speedup-ratio", "10", name="fe")
    prefix = prefix_of(gw.state.root, "r1")
    try:
        ports = _ports()
        gw.sync("r1", [], ports, 1000.0, hold=60)
        port = gw._record("r1")["holderPort"]
        assert holder_supervisor.wait_listening(port)
        url = facts(gw.state.root, "r1")["url"]
        for path in ("/holder/stats", "/metrics", "/favicon.ico", "/"):
            st, _, body = call(url, path, method="GET", timeout=10)
            assert st == 404 and b"/v1/" in body, (path, st, body)
        assert holder_supervisor.stats(port)["received"] == 0  # none was held: none is demand
        gw.sync("r1", [_hp(m_url)], ports, 1001.0, hold=60)
        assert call(url, "/metrics", method="GET")[0] == 404  # the frontend's own page stays behind it
        assert call(url, "/v1/models", method="GET")[0] == 200 and call(url, "/health", method="GET")[0] == 200
    finally:
        m.stop()
        holder_supervisor.stop(prefix)


@needs_nginx
def test_held_requests_are_capped_by_count_and_bytes(gw, tmp_path):  # noqa: F811
    prefix = prefix_of(gw.state.root, "r1")
    try:
        ports = _ports()
        gw.sync("r1", [], ports, 1000.0, hold=60, door=door(tmp_path, max_held=2, max_held_mb=1))
        port = gw._record("r1")["holderPort"]
        assert holder_supervisor.wait_listening(port)
        url = facts(gw.state.root, "r1")["url"]
        # 0.6 MB each (within nginx's in-memory body buffer): one is held, a second would pass 1 MB
        big = json.dumps({**CHAT, "pad": "x" * 600_000}).encode()
        first = Bg(url, body=big)
        first.start()
        wait_until(lambda: (holder_supervisor.stats(port) or {}).get("held") == 1, what="one request held")
        st, hdrs, body = call(url, body=big)
        assert st == 503 and int(hdrs["Retry-After"]) >= 1 and b"bytes of held bodies" in body, (st, hdrs, body)
        second = Bg(url)
        second.start()
        wait_until(lambda: (holder_supervisor.stats(port) or {}).get("held") == 2, what="two requests held")
        st, hdrs, body = call(url)
        assert st == 503 and int(hdrs["Retry-After"]) >= 1 and b"requests held (at most 2)" in body, (st, hdrs, body)
        s = holder_supervisor.stats(port)
        assert (s["held"], s["received"], s["refused"]) == (2, 2, 2), s
    finally:
        holder_supervisor.stop(prefix)


@needs_nginx
def test_tls_on_the_listener_and_plain_http_on_loopback_for_the_probe(gw, tmp_path):  # noqa: F811
    import ssl
    import subprocess

    m, m_url = start_mocker(tmp_path, "--speedup-ratio", "10", name="fe")
    prefix = prefix_of(gw.state.root, "r1")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "2", "-subj", "/CN=gateway"], check=True, capture_output=True)
    try:
        ports = _ports()
        d = holder_supervisor.front_door(None, 1024, 256, (str(cert), str(key)))
        assert [c.kind for c in gw.sync("r1", [_hp(m_url)], ports, 1000.0, hold=None, door=d)] == ["GatewayStarted"]
        url = facts(gw.state.root, "r1")["url"]
        assert url.startswith("https://"), url
        port = int(url.rsplit(":", 1)[1])
        # any address but 127.0.0.1 (127.0.0.2 is this host's loopback too) is TLS; plain HTTP there is refused
        ctx = ssl.create_default_context()
        ctx.load_verify_locations(str(cert))
        ctx.check_hostname = False
        c = http.client.HTTPSConnection("127.0.0.2", port, timeout=10, context=ctx)
        c.request("GET", "/v1/models")
        r = c.getresponse()
        assert r.status == 200 and b'"m"' in r.read()
        assert call(f"http://127.0.0.2:{port}", "/v1/models", method="GET")[0] == 400  # nginx: plain HTTP to HTTPS port
        # the reconciler's probe and the holder: plain HTTP on 127.0.0.1
        assert call(f"http://127.0.0.1:{port}", "/gateway/health", method="GET")[0] == 200
        # taken away: plain HTTP everywhere again, the endpoint http://
        assert [c.kind for c in gw.sync("r1", [_hp(m_url)], ports, 1001.0, hold=None,
                                        door=holder_supervisor.front_door(None, 1024, 256))] == ["GatewayReloaded"]
        assert facts(gw.state.root, "r1")["url"].startswith("http://")
        assert call(f"http://127.0.0.2:{port}", "/v1/models", method="GET")[0] == 200
    finally:
        m.stop()
        holder_supervisor.stop(prefix)


def test_the_cluster_configs_keys_file_is_every_recipes_unless_it_names_its_own():
    from reconciler.recipe.cluster import Cluster, ClusterConfig, apply

    c = Cluster("srtslurm.yaml", ClusterConfig.model_validate({"default_gateway_api_keys": "/etc/site.keys"}))
    assert "default_gateway_api_keys" not in c.carried()  # acted on
    d, notes = apply({"name": "a"}, c)
    assert d["reconcile"]["gateway"]["api_keys"] == "/etc/site.keys" and notes
    own = {"name": "b", "reconcile": {"gateway": {"api_keys": "/etc/b.keys"}}}
    assert apply(own, c)[0]["reconcile"]["gateway"]["api_keys"] == "/etc/b.keys"
    opted_out = {"name": "c", "reconcile": {"gateway": {"api_keys": None}}}  # open on purpose
    assert apply(opted_out, c)[0]["reconcile"]["gateway"]["api_keys"] is None
    with pytest.raises(ValueError, match="absolute path of a keys file"):
        ClusterConfig.model_validate({"default_gateway_api_keys": "keys.txt"})


def _outside_address() -> str | None:
    """An address of this host that is not loopback (a connection to it comes from it, not 127.0.0.1)."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))  # no packet is sent: the route picks the source address
            addr = s.getsockname()[0]
        except OSError:
            return None
    return None if addr.startswith("127.") else addr


@needs_nginx
def test_the_gateways_health_page_answers_on_loopback_only(gw, tmp_path):  # noqa: F811
    addr = _outside_address()
    if addr is None:
        pytest.skip("this host has no address but loopback")
    ports = _ports()
    gw.sync("r1", ["127.0.0.1:9"], ports, 1000.0)
    port = int(facts(gw.state.root, "r1")["url"].rsplit(":", 1)[1])
    st, _, body = call(f"http://127.0.0.1:{port}", "/gateway/health", method="GET")
    assert st == 200 and b"127.0.0.1:9" in body
    st, _, body = call(f"http://{addr}:{port}", "/gateway/health", method="GET")
    assert st == 404 and b"127.0.0.1:9" not in body, (st, body)  # the frontends' addresses stay on the host


def test_what_is_said_of_a_keys_file_is_each_controllers_own(tmp_path):
    """A keys file that cannot be used is said once per new error by each controller's gateways:
    the memory of it is theirs, not the module's (two controllers in one process each say it)."""
    keys = tmp_path / "keys"
    keys.write_text("sk-a-plain-key\n")
    d = holder_supervisor.front_door(str(keys), 8, 8)
    first, second = holder_supervisor.DoorMemory(), holder_supervisor.DoorMemory()
    prefix = tmp_path / "gw"
    said = holder_supervisor.write_door(prefix, {}, d, first)
    assert [k for k, _ in said] == ["GatewayFailed"]
    assert holder_supervisor.write_door(prefix, {}, d, first) == []  # said once
    assert [k for k, _ in holder_supervisor.write_door(prefix, {}, d, second)] == ["GatewayFailed"]
    keys.write_text("# fixed\n" + line_for(KEY, "alice") + "\n")
    assert [k for k, _ in holder_supervisor.write_door(prefix, {}, d, first)] == ["GatewayKeys"]
    assert json.loads((prefix / "door.json").read_text())["keys"] == str(keys)
