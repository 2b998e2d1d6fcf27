"""The gateway with its state directory at 0700 (issue 48, items 5 and 7), on a real nginx.

A reconciler run as root starts nginx's master as root; its workers ran as ``nobody``, which
cannot traverse a private state directory: a body past nginx's 1 MB buffer (spooled under
``gateway/tmp/body``) got 500. They now run as the reconciler's user, and bodies are capped
(``gateway.MAX_BODY_MB``). A symlink planted where nginx writes is refused, not followed."""

from __future__ import annotations

import http.client
import os
import shutil
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from helpers import wait_until
from reconciler import fsutil
from reconciler.drivers.state import StateDir
from reconciler.gateway import MAX_BODY_MB
from reconciler.gateway.procs import children_of
from reconciler.shell.gateway.host import Gateways
from reconciler.shell.gateway.record import facts, prefix_of
from reconciler.shell.gateway.sweep import master_pid
from support.gateways import _ports

needs_nginx = pytest.mark.needs("nginx")
MB = 1024 * 1024


class _Upstream(BaseHTTPRequestHandler):
    """A frontend that reads the whole body and answers its length."""

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        n = int(self.headers.get("Content-Length", 0))
        got = 0
        while got < n:
            chunk = self.rfile.read(min(MB, n - got))
            if not chunk:
                break
            got += len(chunk)
        body = str(got).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:  # quiet
        pass


def _post(url: str, size: int) -> tuple[int, bytes]:
    """POST ``size`` bytes; nginx may answer 413 and close before the body is all sent."""
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    conn.putrequest("POST", "/v1/chat/completions")
    conn.putheader("Content-Type", "application/json")
    conn.putheader("Content-Length", str(size))
    conn.endheaders()
    block = b"x" * MB
    try:
        for sent in range(0, size, MB):
            conn.send(block[: min(MB, size - sent)])
    except (BrokenPipeError, ConnectionResetError):
        pass  # refused early: its answer is still there to read
    resp = conn.getresponse()
    try:
        return resp.status, resp.read()
    finally:
        conn.close()


@pytest.fixture
def private_gw(tmp_path):
    root = tmp_path / "state"
    fsutil.private_root(root)
    assert os.stat(root).st_mode & 0o777 == 0o700
    g = Gateways(StateDir(root), host="127.0.0.1")
    yield g
    for name in g.known():
        pid = master_pid(prefix_of(root, name))
        if pid:
            os.kill(pid, 3)  # SIGQUIT
            wait_until(lambda: master_pid(prefix_of(root, name)) is None, what="nginx gone")


@needs_nginx
def test_bodies_through_a_gateway_whose_state_is_private(private_gw):
    up = ThreadingHTTPServer(("127.0.0.1", 0), _Upstream)
    threading.Thread(target=up.serve_forever, daemon=True).start()
    try:
        ports = _ports()
        changes = private_gw.sync("r", [f"127.0.0.1:{up.server_address[1]}"], ports, 1.0)
        assert [c.kind for c in changes] == ["GatewayStarted"], changes
        url = facts(private_gw.state.root, "r")["url"]
        assert _post(url, 2 * MB) == (200, str(2 * MB).encode())
        assert _post(url, 10 * MB) == (200, str(10 * MB).encode())
        assert MAX_BODY_MB < 50
        status, _ = _post(url, 50 * MB)
        assert status == 413
        pid = master_pid(prefix_of(private_gw.state.root, "r"))
        # its workers are this process's user, not nobody
        for w in children_of(pid):
            uid = next(l.split()[1] for l in Path(f"/proc/{w}/status").read_text().splitlines() if l.startswith("Uid:"))
            assert int(uid) == os.geteuid(), (w, uid)
        # nothing nginx spooled is readable by anyone else
        body_dir = prefix_of(private_gw.state.root, "r") / "tmp" / "body"
        assert body_dir.is_dir() and os.stat(body_dir).st_uid == os.geteuid()
    finally:
        up.shutdown()


@needs_nginx
def test_a_symlink_planted_where_nginx_writes_is_refused(private_gw, tmp_path):
    target = tmp_path / "target"
    target.write_text("precious\n")
    prefix = prefix_of(private_gw.state.root, "r")
    prefix.mkdir(parents=True)
    (prefix / "error.log").symlink_to(target)
    changes = private_gw.sync("r", [], _ports(), 1.0)
    assert [c.kind for c in changes] == ["GatewayFailed"], changes
    assert "symbolic link" in changes[0].message, changes[0].message
    assert master_pid(prefix) is None
    assert target.read_text() == "precious\n"
    # a planted directory link (tmp -> elsewhere) is refused too: bodies would be spooled there
    (prefix / "error.log").unlink()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.rmtree(prefix / "tmp", ignore_errors=True)
    (prefix / "tmp").symlink_to(elsewhere)
    changes = private_gw.sync("r", [], _ports(), 100.0)
    assert [c.kind for c in changes] == ["GatewayFailed"] and "symbolic link" in changes[0].message, changes
    assert list(elsewhere.iterdir()) == []


def test_a_symlink_planted_at_the_holders_log_is_refused(private_gw, tmp_path):
    """The holder (scale to zero) is started by the reconciler with its output appended to
    gateway/holder.log: a link planted there was followed (the reconciler as root appended to
    its target)."""
    import sys

    from reconciler.shell.gateway import holder_supervisor

    target = tmp_path / "target"
    target.write_text("precious\n")
    prefix = prefix_of(private_gw.state.root, "r")
    prefix.mkdir(parents=True)
    (prefix / "holder.log").symlink_to(target)
    ports = _ports()
    want = holder_supervisor.argv(sys.executable, "r", ports.base, ports.base + 1, 10.0, prefix)
    pid, err = holder_supervisor.ensure(prefix, want, ports.base)
    assert pid is None and "symbolic link" in (err or ""), (pid, err)
    assert target.read_text() == "precious\n" and not (prefix / "holder.pid").exists()
