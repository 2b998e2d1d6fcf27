"""Readiness probes, all in parallel, short timeouts: one function per ``Unit.probe`` kind.

``http``: GET http://<node>:<port><path> answers 200 (a service's ``readiness.http.status``). ``dynamo``: a Dynamo system server —
200, or a body whose ``endpoints`` are all ``ready`` (dynamo.mocker 1.6 registers no
health payload, so its /health stays "notready" with every endpoint serving). ``tcp``:
the port accepts a connection. ``file``: the path exists and is not empty. ``log`` is
read by the health tracker (it follows the step's log), ``started`` needs nothing.

Cost, since a settled tick probes every unit: HTTP probes reuse a kept-alive connection per
(host, port) for up to ``REUSE_SECONDS`` (then a fresh connect tests the listener too; a
server that closed it meanwhile is retried once on a fresh one; an answer that is not 2xx is
asked again on a fresh connection and never kept — a successor sharing the port, the built-in
router's next life, is only reached by a new connection), and one tick's probes are
pulled from one queue by a bounded set of threads (``CONCURRENCY``), not a future each — a
hung worker holds one thread for ``TIMEOUT`` (a real deadline, however it trickles bytes).
"""

from __future__ import annotations

import json
import os
import resource
import select
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Iterable

import httptools

from reconciler.shell.readiness import canary
from reconciler.world import Unit

TIMEOUT = 1.0  # per probe, connect to last byte
CONCURRENCY = 16  # probes in flight at once (an unreachable worker holds one for TIMEOUT)
BODY_LIMIT = 65536
REUSE_SECONDS = 30.0  # a kept connection is replaced at least this often: the listener is tested too
# the probes' threads: a pool shared by every controller of the process (threads, not memory: what
# a controller's probes remember is its own ProbeMemory)
_pool = ThreadPoolExecutor(max_workers=CONCURRENCY, thread_name_prefix="probe")
# a probe is no security boundary: what http.client accepted is accepted (bare LF, odd framing)
_LENIENT = dict(lenient_headers=True, lenient_optional_cr_before_lf=True, lenient_optional_lf_after_cr=True,
                lenient_data_after_close=True, lenient_optional_crlf_after_chunk=True,
                lenient_spaces_after_chunk_size=True)


def _keep_limit() -> int:
    """Idle connections kept: a quarter of the open-file limit, at most 4096."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return min(4096, (soft if soft != resource.RLIM_INFINITY else 1 << 16) // 4)


class _Answer:
    """httptools callbacks: the status, the body (bounded) and whether the message is complete."""

    __slots__ = ("body", "size", "headers_done", "complete", "keep", "framed", "parser")

    def __init__(self) -> None:
        self.body: list[bytes] = []
        self.size = 0
        self.headers_done = self.complete = self.keep = self.framed = False
        self.parser = httptools.HttpResponseParser(self)
        if hasattr(self.parser, "set_dangerous_leniencies"):
            self.parser.set_dangerous_leniencies(**_LENIENT)

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() in (b"content-length", b"transfer-encoding"):
            self.framed = True  # its end is known: a connection closed before it is a broken answer

    def on_headers_complete(self) -> None:
        self.headers_done = True
        self.keep = self.parser.should_keep_alive()  # read with the headers: what the server said

    def on_body(self, chunk: bytes) -> None:
        if self.size < BODY_LIMIT:
            self.body.append(chunk[: BODY_LIMIT - self.size])
        self.size += len(chunk)

    def on_message_complete(self) -> None:
        self.complete = True


def _exchange(sock: socket.socket, request: bytes, deadline: float) -> tuple[int, bytes, bool]:
    """One GET on ``sock``: (status, body, the connection may be reused). ``deadline`` holds
    however the server trickles its answer."""
    answer = _Answer()
    parser = answer.parser
    sock.settimeout(max(0.01, deadline - time.monotonic()))
    sock.sendall(request)
    while not answer.complete:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("no whole answer within the probe's timeout")
        sock.settimeout(left)
        data = sock.recv(65536)
        if not data:
            if answer.headers_done and not answer.framed:  # a body delimited by the end of the connection
                return parser.get_status_code(), b"".join(answer.body), False
            raise ConnectionResetError("closed before a whole answer")  # on a kept-alive connection: retried
        parser.feed_data(data)
        if answer.size > BODY_LIMIT:
            return parser.get_status_code(), b"".join(answer.body), False  # the rest is not read: not reusable
    return parser.get_status_code(), b"".join(answer.body), answer.keep


class KeptConnections:
    """Kept-alive probe connections, one per endpoint: (socket, when it was connected)."""

    def __init__(self) -> None:
        self.idle: dict[tuple[str, int], tuple[socket.socket, float]] = {}

    def reusable(self, key: tuple[str, int]) -> tuple[socket.socket, float] | None:
        """A kept connection that is young enough and has nothing waiting on it (a server that closed
        it, or said something unasked, e.g. 408 on idle): otherwise closed, and None."""
        kept = self.idle.pop(key, None)
        if kept is None:
            return None
        sock, since = kept
        try:
            stale = time.monotonic() - since > REUSE_SECONDS or bool(select.select([sock], [], [], 0)[0])
        except (OSError, ValueError):
            stale = True
        if stale:
            sock.close()
            return None
        return kept

    def keep(self, key: tuple[str, int], sock: socket.socket, since: float) -> bool:
        """Kept unless too many are, or another thread kept one for this endpoint meanwhile."""
        return len(self.idle) < _keep_limit() and self.idle.setdefault(key, (sock, since))[0] is sock

    def forget_all_but(self, probed: set[tuple[str, int]]) -> None:
        """Connections to endpoints no longer probed (a worker gone) are closed."""
        for key in [k for k in self.idle if k not in probed]:
            kept = self.idle.pop(key, None)
            if kept is not None:
                kept[0].close()


class ProbeMemory:
    """What the readiness probes remember between passes: one per controller (its Observer's), so
    that two controllers in one process share no connection and no canary answer."""

    def __init__(self) -> None:
        self.conns = KeptConnections()
        self.canaries = canary.Canaries()


def _get(host: str, port: int, path: str, timeout: float, conns: KeptConnections | None) -> tuple[int, bytes]:
    """``conns``: where connections are kept between probes (None: a fresh one, closed after)."""
    key = (host, port)
    where = f"[{host}]" if ":" in host else host  # an IPv6 literal
    request = f"GET {path or '/'} HTTP/1.1\r\nHost: {where}:{port}\r\nUser-Agent: reconciler-probe\r\n\r\n".encode()
    deadline = time.monotonic() + timeout
    kept = conns.reusable(key) if conns is not None else None
    sock = since = None
    if kept is not None:
        sock, since = kept
        try:
            status, body, keep = _exchange(sock, request, deadline)
        except (ConnectionResetError, BrokenPipeError):
            sock.close()  # the server closed it meanwhile: once more, on a fresh connection
            sock = None
        except BaseException:
            sock.close()
            raise
        if sock is not None and not 200 <= status < 300:
            # a kept connection reaches the process that accepted it: a successor sharing the port
            # (the built-in router's next life) answers only on a fresh one, so a failure is asked again
            sock.close()
            sock = None
    if sock is None:
        sock = socket.create_connection(key, timeout=timeout)
        since = time.monotonic()
        try:
            status, body, keep = _exchange(sock, request, deadline)
        except BaseException:
            sock.close()
            raise
    ok = 200 <= status < 300  # a failing endpoint is asked on a fresh connection next time
    if not (ok and keep and conns is not None and conns.keep(key, sock, since)):
        sock.close()  # not reusable, failing, too many kept, or another thread kept one for this endpoint
    return status, body


def probe_one(host: str, port: int, path: str, timeout: float = TIMEOUT, status: int = 200,
              conns: KeptConnections | None = None) -> bool:
    try:
        return _get(host, port, path, timeout, conns)[0] == status
    except Exception:  # noqa: BLE001 - OSError, HTTPException, a bad host name: not healthy
        return False


def probe_dynamo(host: str, port: int, path: str, timeout: float = TIMEOUT,
                 conns: KeptConnections | None = None) -> bool:
    try:
        status, body = _get(host, port, path, timeout, conns)
    except Exception:  # noqa: BLE001
        return False
    if status == 200:
        return True
    try:
        endpoints = json.loads(body).get("endpoints")
    except (ValueError, AttributeError):
        return False
    return isinstance(endpoints, dict) and bool(endpoints) and all(v == "ready" for v in endpoints.values())


def probe_life(host: str, port: int, path: str, life: str, timeout: float = TIMEOUT,
               conns: KeptConnections | None = None) -> bool:
    """A router life sharing its port: 200 *and* a body that names this life. Another process on
    the port (the other life, a router of an older version, another frontend) is not this one."""
    try:
        status, body = _get(host, port, path, timeout, conns)
        return status == 200 and json.loads(body).get("life") == life
    except Exception:  # noqa: BLE001 - as probe_one: anything but this life answering is not Ready
        return False


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


def _probe(u: Unit, canary_wait: float, memory: ProbeMemory) -> bool:
    memory.canaries.why.pop(u.key, None)  # a canary that fails says why there; anything else clears it
    ok = _probe_health(u, memory.conns)
    return memory.canaries.passes(u, canary_wait) if ok and u.canary else ok


def _probe_health(u: Unit, conns: KeptConnections) -> bool:
    if u.probe == "started":
        return True
    if u.probe == "file":
        return probe_file(u.probe_arg)
    if not u.health_port:
        return False
    if u.probe == "tcp":
        return probe_tcp(u.nodes[0], u.health_port)
    if u.probe == "dynamo":
        return probe_dynamo(u.nodes[0], u.health_port, u.health_path, conns=conns)
    if u.shares_port:
        return probe_life(u.nodes[0], u.health_port, u.health_path, "ab"[u.slot], conns=conns)
    return probe_one(u.nodes[0], u.health_port, u.health_path, status=int(u.probe_arg or 200), conns=conns)


def probe_units(units: Iterable[Unit], forget_idle: bool = True, canary_wait: float = canary.CANARY_WAIT, *,
                memory: ProbeMemory) -> dict[tuple[str, str, int], bool]:
    """Ready per unit key, for every unit probed here (``log`` units are the tracker's).
    ``memory``: the controller's kept connections and canaries.
    ``forget_idle``: drop kept connections to anything not probed now (the tick's main probe).
    ``canary_wait``: how long a frontend's canary is waited for (``Canaries.passes``)."""
    todo = [u for u in units if u.probe != "log" and (u.health_port or u.probe in ("started", "file"))]
    out: dict[tuple[str, str, int], bool] = {}
    queue = iter(todo)  # shared by the threads; next() on it is atomic under the GIL

    def drain() -> None:
        for u in queue:
            out[u.key] = _probe(u, canary_wait, memory)

    for f in [_pool.submit(drain) for _ in range(min(CONCURRENCY, len(todo)))]:
        f.result()
    if forget_idle:
        memory.conns.forget_all_but({(u.nodes[0], u.health_port) for u in todo if u.health_port})
    return out


PAGE_LIMIT = 4 << 20  # a metrics page read by the autoscaler (a real engine's runs to some 100 KB)


def fetch(url: str, timeout: float = TIMEOUT) -> str | None:
    """GET ``url`` (http://host:port/path, straight: no proxy): its text when it answers 200, else None."""
    import http.client
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        conn = http.client.HTTPConnection(parts.hostname or "", parts.port or 80, timeout=timeout)
        try:
            conn.request("GET", parts.path or "/", headers={"User-Agent": "reconciler-autoscale"})
            r = conn.getresponse()
            return r.read(PAGE_LIMIT).decode(errors="replace") if r.status == 200 else None
        finally:
            conn.close()
    except Exception:  # noqa: BLE001 - OSError, HTTPException, a bad host name: no page
        return None


def fetch_all(urls: Iterable[str]) -> dict[str, str | None]:
    """Every URL's page, in parallel on the probes' threads (between ticks' probes, never during)."""
    todo = list(urls)
    out: dict[str, str | None] = {}
    queue = iter(todo)

    def drain() -> None:
        for url in queue:
            out[url] = fetch(url)

    for f in [_pool.submit(drain) for _ in range(min(CONCURRENCY, len(todo)))]:
        f.result()
    return out
