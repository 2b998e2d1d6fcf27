"""The reconciler's own pages (issue 48, item 6): the status page (``--ui-addr``) and the metrics
(``--metrics-addr``) of a real ``reconciler run`` on the real Slurm answer only to their own host
names (a foreign ``Host:`` is DNS rebinding: 421) and, with ``--http-token-file``, only to the token."""

from __future__ import annotations

import http.client
import os

import pytest

from harness import Harness
from helpers import free_port, wait_until
from reconciler import hostguard

pytestmark = pytest.mark.slurm
TOKEN = "page-token-0123456789abcdef"


def ask(port: int, path: str, host: str | None = None, headers: dict | None = None) -> tuple[int, dict, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.putrequest("GET", path, skip_host=True)
    conn.putheader("Host", host if host is not None else f"127.0.0.1:{port}")
    for k, v in (headers or {}).items():
        conn.putheader(k, v)
    conn.endheaders()
    r = conn.getresponse()
    return r.status, dict(r.getheaders()), r.read()


def test_host_names_that_are_allowed():
    names = hostguard.own_names("127.0.0.1")
    for ok in ("127.0.0.1:8080", "localhost", "LOCALHOST:1", "[::1]:9", "10.1.2.3", f"{os.uname().nodename}:80"):
        assert hostguard.host_allowed(ok, names), ok
    for bad in ("evil.example", "evil.example:8080", "localhost.evil.example", "", None):
        assert not hostguard.host_allowed(bad, names), bad


def test_status_page_and_metrics_check_host_and_token(tmp_path):
    h = Harness(tmp_path, "slurm")
    try:
        token = tmp_path / "token"
        token.write_text(TOKEN + "\n")
        token.chmod(0o600)
        ui, metrics = free_port(), free_port()
        h.start("--ui-addr", f"127.0.0.1:{ui}", "--metrics-addr", f"127.0.0.1:{metrics}",
                "--http-token-file", str(token))
        bearer = {"Authorization": f"Bearer {TOKEN}"}
        wait_until(lambda: ask(ui, "/healthz", headers=bearer)[0] == 200, timeout=60, what="the status page up")
        for port, path in ((ui, "/api/status"), (ui, "/"), (metrics, "/metrics")):
            assert ask(port, path, host="rebound.example", headers=bearer)[0] == 421, (port, path)
            assert ask(port, path, host=f"rebound.example:{port}", headers=bearer)[0] == 421, (port, path)
            assert ask(port, path)[0] == 401, (port, path)
            assert ask(port, path, headers={"Authorization": "Bearer not-the-token-at-all"})[0] == 401
            assert ask(port, path, headers=bearer)[0] == 200, (port, path)
            assert ask(port, path, host=f"localhost:{port}", headers=bearer)[0] == 200, (port, path)
        # a browser: ?token= once sets the cookie, which the page's own fetches then carry
        st, hdrs, _ = ask(ui, f"/?token={TOKEN}")
        assert st == 200 and hdrs["Set-Cookie"].startswith(f"{hostguard.COOKIE}={TOKEN};"), hdrs
        assert "HttpOnly" in hdrs["Set-Cookie"] and "SameSite=Strict" in hdrs["Set-Cookie"]
        assert ask(ui, "/api/status", headers={"Cookie": f"{hostguard.COOKIE}={TOKEN}"})[0] == 200
    finally:
        h.stop()
        h.cleanup()


def test_a_token_file_readable_by_others_is_refused(tmp_path):
    h = Harness(tmp_path, "slurm")
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    token.chmod(0o644)
    r = h.cli("run", "--once", "--http-token-file", str(token))
    assert r.returncode != 0 and "chmod 600" in r.stderr, (r.returncode, r.stderr)
