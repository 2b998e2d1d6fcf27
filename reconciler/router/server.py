"""The builtin router: one OpenAI endpoint in front of a recipe's workers.

Workers come from a JSON file the reconciler rewrites
(``{"workers": [{"url": ..., "role": "agg|prefill|decode"}, ...]}``); the file is
re-read when it changes, no restart. Balancing is least-outstanding-requests.
A disaggregated request goes to a prefill worker first (which answers with a
handle after the first token), then to a decode worker that streams the answer.
Responses are streamed through as they arrive. A refused connection is retried
once on another worker; no worker at all is a 503 with a JSON error.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from reconciler.serving.openai import ApiError, error_response, openai_app, parse_json_body

# the worker refused, closed or reset the connection before any byte of an answer (a life being
# stopped as it is taken out of the routers, a slow endpoints-file pickup): tried once elsewhere.
# ClientOSError is a reset (ECONNRESET) or broken pipe: a rolling update's client saw a 502 for one
RETRYABLE = (aiohttp.ClientOSError, aiohttp.ServerDisconnectedError)  # ClientOSError: refused (ClientConnectorError) too
COOLDOWN = 2.0  # seconds a worker that refused a connection is skipped


def log(level: str, msg: str) -> None:
    print(f"{level} router: {msg}", flush=True)


@dataclass
class Worker:
    url: str
    role: str
    outstanding: int = 0
    down_until: float = 0.0


@dataclass
class Pool:
    workers: dict[str, Worker] = field(default_factory=dict)
    _rr: int = 0

    def update(self, entries: list[dict[str, Any]]) -> None:
        fresh: dict[str, Worker] = {}
        for e in entries:
            url = str(e["url"]).rstrip("/")
            role = str(e.get("role", "agg"))
            old = self.workers.get(url)
            fresh[url] = old if old and old.role == role else Worker(url, role)
        self.workers = fresh

    def pick(self, role: str, exclude: set[str] = frozenset()) -> Worker | None:
        now = time.monotonic()
        cands = [w for w in self.workers.values() if w.role == role and w.url not in exclude]
        live = [w for w in cands if w.down_until <= now] or cands
        if not live:
            return None
        self._rr += 1
        # least outstanding; ties rotate by position so equal workers share the load (rotating by
        # hash(url) did not: two urls whose hashes had the same parity tied forever, one got it all)
        order = {w.url: (i + self._rr) % len(live) for i, w in enumerate(live)}
        return min(live, key=lambda w: (w.outstanding, order[w.url]))

    def roles(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for w in self.workers.values():
            out[w.role] = out.get(w.role, 0) + 1
        return out


class Router:
    def __init__(self, endpoints_file: Path, model_name: str | None = None, poll: float = 0.25,
                 request_timeout: float = 30.0, life: str = "a"):
        self.endpoints_file = Path(endpoints_file)
        self.life = life
        self.request_timeout = request_timeout
        self.model_name = model_name
        self.poll = poll
        self.pool = Pool()
        self._stamp: tuple[int, int] | None = None
        self._session: aiohttp.ClientSession | None = None
        self._tasks: list[asyncio.Task] = []
        r = self.registry = CollectorRegistry()
        self.m_requests = Counter("router_requests", "Requests by endpoint and status", ["endpoint", "status"], registry=r)
        self.m_retries = Counter("router_retries", "Requests retried on another worker", registry=r)
        self.m_outstanding = Gauge("router_outstanding_requests", "In-flight requests per worker", ["worker", "role"], registry=r)
        self.m_workers = Gauge("router_workers", "Workers known, by role", ["role"], registry=r)
        self.m_latency = Histogram("router_request_duration_seconds", "Time to the end of the response", registry=r)

    # ---------------------------------------------------------------- endpoints file
    def load_endpoints(self) -> bool:
        """Re-read the endpoints file when it changed; return True when it did."""
        try:
            st = os.stat(self.endpoints_file)
        except FileNotFoundError:
            # gone (state/ wiped, or being rewritten by hand): the last list keeps serving until the
            # reconciler writes the file again; a deployment deleted for good takes its router along
            if self._stamp is not None:
                self._stamp = None
                log("WARN", f"{self.endpoints_file} is gone: serving its last list ({self.pool.roles() or 'none'})")
            return False
        stamp = (st.st_mtime_ns, st.st_size)
        if stamp == self._stamp:
            return False
        try:
            data = json.loads(self.endpoints_file.read_text())
            entries = data["workers"]
            if not isinstance(entries, list) or not all(isinstance(e, dict) and "url" in e for e in entries):
                raise ValueError("'workers' must be a list of objects with a 'url'")
        except (OSError, ValueError, KeyError, TypeError) as e:
            log("WARN", f"ignoring unreadable {self.endpoints_file}: {e}")
            self._stamp = stamp
            return False
        self._stamp = stamp
        self.pool.update(entries)
        log("INFO", f"endpoints: {self.pool.roles() or 'none'}")
        for role in ("agg", "prefill", "decode"):
            self.m_workers.labels(role).set(self.pool.roles().get(role, 0))
        return True

    async def _watch(self) -> None:
        while True:
            self.load_endpoints()
            await asyncio.sleep(self.poll)

    # ---------------------------------------------------------------- app
    def app(self) -> web.Application:
        return openai_app(health=self.health, metrics=self.metrics, models=self.models, chat=self.forward,
                          completions=self.forward, on_startup=self._startup, on_cleanup=self._cleanup,
                          request_timeout=self.request_timeout)

    async def _startup(self, app: web.Application) -> None:
        # idle upstream connections are dropped here first (5 s), well before a worker drops them
        # (its --request-timeout): reusing one the worker just closed would fail the request
        conn = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300, keepalive_timeout=5)
        self._session = aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=None, sock_connect=5))
        self.load_endpoints()
        self._tasks.append(asyncio.create_task(self._watch()))
        log("INFO", "ready")

    async def _cleanup(self, app: web.Application) -> None:
        for t in self._tasks:
            t.cancel()
        if self._session:
            await self._session.close()

    def routable(self) -> tuple[bool, str]:
        roles = self.pool.roles()
        if roles.get("agg"):
            return True, "agg"
        if roles.get("prefill") and roles.get("decode"):
            return True, "disagg"
        if roles.get("decode"):
            return True, "decode-only"
        return False, "no workers"

    async def health(self, request: web.Request) -> web.Response:
        life = request.query.get("life")
        if life is not None and life != self.life:
            # the other life shares this port: the probe of that life must not read this one as Ready
            return web.json_response({"status": "other life", "life": self.life}, status=404)
        ok, how = self.routable()
        return web.json_response({"status": "ok", "routing": how, "workers": self.pool.roles(), "life": self.life})

    async def metrics(self, request: web.Request) -> web.Response:
        for w in self.pool.workers.values():
            self.m_outstanding.labels(w.url, w.role).set(w.outstanding)
        return web.Response(body=generate_latest(self.registry), content_type="text/plain", charset="utf-8")

    async def models(self, request: web.Request) -> web.Response:
        w = self.pool.pick("agg") or self.pool.pick("decode")
        if w is not None:
            try:
                async with self._session.get(w.url + "/v1/models", timeout=aiohttp.ClientTimeout(total=5)) as r:
                    return web.json_response(await r.json(), status=r.status)
            except (TimeoutError, aiohttp.ClientError, ValueError):
                pass
        data = [{"id": self.model_name, "object": "model", "owned_by": "reconciler"}] if self.model_name else []
        return web.json_response({"object": "list", "data": data})

    # ---------------------------------------------------------------- forwarding
    async def forward(self, request: web.Request) -> web.StreamResponse:
        t0 = time.monotonic()
        endpoint = request.path
        try:
            body = await parse_json_body(request)
            ok, how = self.routable()
            if not ok:
                raise ApiError(503, "no worker is available for this deployment yet", "service_unavailable")
            if how == "disagg":
                handle = await self._prefill(endpoint, body)
                body = {**body, "disaggregated_params": handle}
                resp = await self._relay(request, endpoint, body, "decode")
            else:
                resp = await self._relay(request, endpoint, body, "agg" if how == "agg" else "decode")
        except ApiError as e:
            self.m_requests.labels(endpoint, str(e.status)).inc()
            return error_response(e)
        except asyncio.CancelledError:
            self.m_requests.labels(endpoint, "499").inc()  # the client left; the upstream request is closed with it
            raise
        except Exception as e:  # noqa: BLE001 - a bug here must still be a counted, OpenAI-shaped 500
            log("ERROR", f"{endpoint}: {type(e).__name__}: {e}")
            self.m_requests.labels(endpoint, "500").inc()
            return error_response(ApiError(500, f"router error: {type(e).__name__}", "server_error"))
        self.m_requests.labels(endpoint, str(resp.status)).inc()
        self.m_latency.observe(time.monotonic() - t0)
        return resp

    async def _prefill(self, endpoint: str, body: dict[str, Any]) -> dict[str, Any]:
        pre = {**body, "stream": False, "max_tokens": 1}
        pre.pop("stream_options", None)
        pre.pop("max_completion_tokens", None)
        tried: set[str] = set()
        for attempt in range(2):
            w = self.pool.pick("prefill", tried)
            if w is None:
                break
            tried.add(w.url)
            w.outstanding += 1
            try:
                async with self._session.post(w.url + endpoint, json=pre) as r:
                    data = await r.json(content_type=None)
                    if r.status != 200:
                        raise ApiError(r.status, _upstream_message(data, r.status))
                    params = data.get("disaggregated_params")
                    if not isinstance(params, dict):
                        raise ApiError(502, f"prefill worker {w.url} returned no handle")
                    return params
            except RETRYABLE:
                w.down_until = time.monotonic() + COOLDOWN
                if attempt == 0:
                    self.m_retries.inc()
                    continue
            finally:
                w.outstanding -= 1
        raise ApiError(503, "no prefill worker is reachable", "service_unavailable")

    async def _relay(self, request: web.Request, endpoint: str, body: dict[str, Any], role: str) -> web.StreamResponse:
        tried: set[str] = set()
        for attempt in range(2):
            w = self.pool.pick(role, tried)
            if w is None:
                break
            tried.add(w.url)
            w.outstanding += 1
            resp: web.StreamResponse | None = None
            tail = b""  # the stream's last bytes: whether an event was left unfinished
            try:
                async with self._session.post(w.url + endpoint, json=body) as up:
                    resp = web.StreamResponse(status=up.status)
                    ctype = up.headers.get("Content-Type")
                    if ctype:
                        resp.headers["Content-Type"] = ctype
                    await resp.prepare(request)
                    async for chunk in up.content.iter_any():
                        await resp.write(chunk)
                        tail = (tail + chunk)[-2:]
                    await resp.write_eof()
                    return resp
            except aiohttp.ClientError as e:
                w.down_until = time.monotonic() + COOLDOWN
                if resp is not None and resp.prepared:
                    log("WARN", f"{w.url} failed mid-response: {e}")
                    return await _cut(request, resp, f"{role} worker {w.url} failed mid-response: {e}", tail)
                if isinstance(e, RETRYABLE) and attempt == 0:
                    self.m_retries.inc()
                    continue
                raise ApiError(502, f"{role} worker {w.url} failed: {e}", "bad_gateway") from None
            finally:
                w.outstanding -= 1
        raise ApiError(503, f"no {role} worker is reachable", "service_unavailable")


async def _cut(request: web.Request, resp: web.StreamResponse, why: str, tail: bytes) -> web.StreamResponse:
    """The worker died mid-response. A clean end would read as a whole answer: a stream (SSE) ends
    with an error event first, as OpenAI's API sends one (``data: {"error": ...}``), after a blank
    line that closes an event the worker had begun; any other body is cut off without its end
    (the client's read fails), since nothing can be appended to a JSON document."""
    if "text/event-stream" in resp.headers.get("Content-Type", ""):
        event = {"error": {"message": why, "type": "server_error", "code": 502}}
        sep = b"" if tail.endswith(b"\n\n") else b"\n\n"
        try:
            await resp.write(sep + b"data: " + json.dumps(event).encode() + b"\n\n")
            await resp.write_eof()
        except (ConnectionError, RuntimeError):
            pass  # the client left as well
        return resp
    resp.force_close()
    if request.transport is not None:
        request.transport.abort()  # no terminating chunk: an incomplete body, not a short one
    return resp


def _upstream_message(data: Any, status: int) -> str:
    if isinstance(data, dict) and isinstance(data.get("error"), dict):
        return str(data["error"].get("message", f"upstream error {status}"))
    return f"upstream error {status}"
