"""Readiness probes, all in parallel, short timeouts: one function per ``Unit.probe`` kind.

``http``: GET http://<node>:<port><path> answers 200 (a service's ``readiness.http.status``). ``dynamo``: a Dynamo system server —
200, or a body whose ``endpoints`` are all ``ready`` (dynamo.mocker 1.6 registers no
health payload, so its /health stays "notready" with every endpoint serving). ``tcp``:
the port accepts a connection. ``file``: the path exists and is not empty. ``log`` is
read by the health tracker (it follows the step's log), ``started`` needs nothing.

Cost, since a settled tick probes every unit: HTTP probes reuse a kept-alive connection per
(host, port) (a server that closed it meanwhile is retried once on a fresh one), and one
tick's probes are pulled from one queue by a bounded set of threads (``CONCURRENCY``), not a
future each — a hung worker holds one thread for ``TIMEOUT``, never the tick.
"""

from __future__ import annotations

import json
import os
import resource
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Iterable

import httptools

from reconciler.units import Unit

TIMEOUT = 1.0
CONCURRENCY = 8  # probes in flight at once (a hung worker holds one for TIMEOUT)
BODY_LIMIT = 65536
_pool = ThreadPoolExecutor(max_workers=CONCURRENCY, thread_name_prefix="probe")
_idle: dict[tuple[str, int], socket.socket] = {}  # kept-alive connections, one per endpoint


def _keep_limit() -> int:
    """Idle connections kept: a quarter of the open-file limit, at most 4096."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return min(4096, (soft if soft != resource.RLIM_INFINITY else 1 << 16) // 4)


class _Answer:
    """httptools callbacks: the status, the body (bounded) and whether the message is complete."""

    __slots__ = ("body", "size", "headers_done", "complete", "keep", "parser")

    def __init__(self) -> None:
        self.body: list[bytes] = []
        self.size = 0
        self.headers_done = self.complete = self.keep = False
        self.parser = httptools.HttpResponseParser(self)

    def on_headers_complete(self) -> None:
        self.headers_done = True
        self.keep = self.parser.should_keep_alive()  # (after the message it always reads False)

    def on_body(self, chunk: bytes) -> None:
        if self.size < BODY_LIMIT:
            self.body.append(chunk[: BODY_LIMIT - self.size])
        self.size += len(chunk)

    def on_message_complete(self) -> None:
        self.complete = True


def _exchange(sock: socket.socket, request: bytes, deadline: float) -> tuple[int, bytes, bool]:
    """One GET on ``sock``: (status, body, the connection may be reused)."""
    answer = _Answer()
    parser = answer.parser
    sock.settimeout(max(0.01, deadline - time.monotonic()))
    sock.sendall(request)
    while not answer.complete:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        data = sock.recv(65536)
        if not data:
            if answer.headers_done:  # a body delimited by the end of the connection
                return parser.get_status_code(), b"".join(answer.body), False
            raise ConnectionResetError("closed before answering")  # on a kept-alive connection: retried
        parser.feed_data(data)
        if answer.size > BODY_LIMIT:
            return parser.get_status_code(), b"".join(answer.body), False  # the rest is not read: not reusable
    return parser.get_status_code(), b"".join(answer.body), answer.keep


def _get(host: str, port: int, path: str, timeout: float) -> tuple[int, bytes]:
    key = (host, port)
    request = f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUser-Agent: reconciler-probe\r\n\r\n".encode()
    deadline = time.monotonic() + timeout
    sock = _idle.pop(key, None)
    if sock is not None:
        try:
            status, body, keep = _exchange(sock, request, deadline)
        except (ConnectionResetError, BrokenPipeError):
            sock.close()  # the server closed it while idle: once more, on a fresh connection
            sock = None
        except BaseException:
            sock.close()
            raise
    if sock is None:
        sock = socket.create_connection(key, timeout=timeout)
        try:
            status, body, keep = _exchange(sock, request, deadline)
        except BaseException:
            sock.close()
            raise
    if not (keep and len(_idle) < _keep_limit() and _idle.setdefault(key, sock) is sock):
        sock.close()  # not reusable, too many kept, or another thread kept one for this endpoint
    return status, body


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
    out: dict[tuple[str, str, int], bool] = {}
    queue = iter(todo)  # shared by the threads; next() on it is atomic under the GIL

    def drain() -> None:
        for u in queue:
            out[u.key] = _probe(u)

    for f in [_pool.submit(drain) for _ in range(min(CONCURRENCY, len(todo)))]:
        f.result()
    _forget_idle({(u.nodes[0], u.health_port) for u in todo if u.health_port})
    return out


def _forget_idle(probed: set[tuple[str, int]]) -> None:
    """Connections to endpoints no longer probed (a worker gone) are closed."""
    for key in [k for k in _idle if k not in probed]:
        conn = _idle.pop(key, None)
        if conn is not None:
            conn.close()
