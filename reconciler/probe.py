"""Readiness probes, all in parallel, short timeouts: one function per ``Unit.probe`` kind.

``http``: GET http://<node>:<port><path> answers 200 (a service's ``readiness.http.status``). ``dynamo``: a Dynamo system server —
200, or a body whose ``endpoints`` are all ``ready`` (dynamo.mocker 1.6 registers no
health payload, so its /health stays "notready" with every endpoint serving). ``tcp``:
the port accepts a connection. ``file``: the path exists and is not empty. ``log`` is
read by the health tracker (it follows the step's log), ``started`` needs nothing.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Iterable

from reconciler.units import Unit

TIMEOUT = 1.0
_pool = ThreadPoolExecutor(max_workers=32, thread_name_prefix="probe")


def _get(host: str, port: int, path: str, timeout: float) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        return r.status, r.read(65536)
    finally:
        conn.close()


def probe_one(host: str, port: int, path: str, timeout: float = TIMEOUT, status: int = 200) -> bool:
    try:
        return _get(host, port, path, timeout)[0] == status
    except Exception:  # noqa: BLE001 - OSError, HTTPException, a bad host name: not healthy
        return False


def probe_dynamo(host: str, port: int, path: str, timeout: float = TIMEOUT) -> bool:
    try:
        status, body = _get(host, port, path, timeout)
    except Exception:  # noqa: BLE001
        return False
    if status == 200:
        return True
    try:
        endpoints = json.loads(body).get("endpoints")
    except (ValueError, AttributeError):
        return False
    return isinstance(endpoints, dict) and bool(endpoints) and all(v == "ready" for v in endpoints.values())


def probe_tcp(host: str, port: int, timeout: float = TIMEOUT) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def probe_file(path: str) -> bool:
    try:
        return os.path.getsize(path) > 0
    except OSError:
        return False


def _probe(u: Unit) -> bool:
    if u.probe == "started":
        return True
    if u.probe == "file":
        return probe_file(u.probe_arg)
    if not u.health_port:
        return False
    if u.probe == "tcp":
        return probe_tcp(u.nodes[0], u.health_port)
    if u.probe == "dynamo":
        return probe_dynamo(u.nodes[0], u.health_port, u.health_path)
    return probe_one(u.nodes[0], u.health_port, u.health_path, status=int(u.probe_arg or 200))


def probe_units(units: Iterable[Unit]) -> dict[tuple[str, str, int], bool]:
    """Ready per unit key, for every unit probed here (``log`` units are the tracker's)."""
    todo = [u for u in units if u.probe != "log" and (u.health_port or u.probe in ("started", "file"))]
    futures = {u.key: _pool.submit(_probe, u) for u in todo}
    return {k: f.result() for k, f in futures.items()}
