"""A gateway found again after its state is removed, on a real nginx (shell/gateway/refind.py):
the master that answers as the gateway is adopted on its port; a master with the gateway's prefix
that cannot be adopted is ended and said, its port kept for the one started next. The end to end
run through a live reconciler and a client loop: tests/test_gateway_refound_e2e.py."""

from __future__ import annotations

import json
import socket
import subprocess
from pathlib import Path

import pytest

from reconciler.shell.gateway.host import Gateways
from reconciler.shell.gateway.record import facts, prefix_of, record_path
from reconciler.shell.gateway.refind import sockets_of
from reconciler.shell.gateway.sweep import master_pid, masters_under
from tests.helpers import wait_until
from support.gateways import _ports, gw  # noqa: F401 - the fixture gw: Gateways over a real nginx

pytestmark = pytest.mark.needs("nginx")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stranger(g: Gateways, prefix: Path, port: int) -> int:
    """An nginx master run by hand with the gateway's prefix, that is not the gateway (it answers
    404 to everything): what a reconciler before the fix or an operator's experiment leaves."""
    prefix.mkdir(parents=True, exist_ok=True)
    (prefix / "other.conf").write_text(
        f"pid other.pid;\nevents {{}}\nhttp {{ access_log off; client_body_temp_path other_body;\n"
        f"  server {{ listen 127.0.0.1:{port}; return 404; }} }}\n")
    subprocess.run([g.nginx, "-p", f"{prefix}/", "-c", str(prefix / "other.conf"), "-e", str(prefix / "other.log")],
                   check=True, capture_output=True, timeout=30)
    pid = wait_until(lambda: (prefix / "other.pid").exists() and int((prefix / "other.pid").read_text()),
                     what="the stranger's pid file")
    # nginx writes its pid file before it names itself "nginx: master process" (the name the scan
    # goes by): under load a sync in between saw no stranger (CI, 2026-12-07)
    wait_until(lambda: pid in masters_under(prefix), what="the stranger named as a master")
    return pid


def gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes() == b""
    except OSError:
        return True


def test_the_master_is_adopted_on_its_port_and_a_duplicate_ended(gw):
    ports = _ports()
    gw.sync("r1", [], ports, 1.0)
    prefix, path = prefix_of(gw.state.root, "r1"), record_path(gw.state.root, "r1")
    port, pid = json.loads(path.read_text())["port"], master_pid(prefix)
    assert sockets_of(pid) == (("0.0.0.0", port),)
    dup = stranger(gw, prefix, free_port())
    path.unlink()
    (prefix / "nginx.pid").unlink()
    (prefix / "nginx.conf").unlink()
    changes = gw.sync("r1", [], ports, 2.0)
    assert [c.kind for c in changes][:2] == ["GatewayReplaced", "GatewayFound"], changes
    assert str(dup) in changes[0].message and f"127.0.0.1:{port}" in changes[1].message
    wait_until(lambda: gone(dup), what="the duplicate ended")
    assert masters_under(prefix) == [pid] and master_pid(prefix) == pid
    assert json.loads(path.read_text())["port"] == port and (prefix / "nginx.pid").read_text() == f"{pid}\n"
    assert (prefix / "nginx.conf").exists()  # written again (a reload)
    assert gw.sync("r1", [], ports, 3.0) == []  # and nothing more to do


def test_a_master_whose_pid_is_lost_is_adopted_not_doubled(gw):
    """The record keeps the port but no pid, and the pid file is gone: the port is held, and the
    holder is our master (before: 'port held by another process', waiting for ever)."""
    ports = _ports()
    gw.sync("r1", [], ports, 1.0)
    prefix, path = prefix_of(gw.state.root, "r1"), record_path(gw.state.root, "r1")
    pid = master_pid(prefix)
    path.write_text(json.dumps({**json.loads(path.read_text()), "pid": None}))
    (prefix / "nginx.pid").unlink()
    assert [c.kind for c in gw.sync("r1", [], ports, 2.0)] == ["GatewayFound"]
    assert master_pid(prefix) == pid and masters_under(prefix) == [pid]
    assert gw.sync("r1", [], ports, 3.0) == []


def test_a_master_that_cannot_be_adopted_is_replaced_on_its_port(gw):
    """Nothing recorded, and the master with the gateway's prefix does not answer as it: ended and
    said; the new gateway listens on the port it held (the endpoint clients know)."""
    prefix = prefix_of(gw.state.root, "r1")
    port = free_port()
    dup = stranger(gw, prefix, port)
    changes = gw.sync("r1", [], _ports(), 1.0)
    assert [c.kind for c in changes] == ["GatewayReplaced", "GatewayStarted"], changes
    assert "does not answer /gateway/health" in changes[0].message
    assert gone(dup) and facts(gw.state.root, "r1")["url"] == f"http://127.0.0.1:{port}"
    assert masters_under(prefix) == [master_pid(prefix)]
