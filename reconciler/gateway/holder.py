"""The gateway's holder: where requests wait while a deployment has no frontend answering (the
only one relaunching or moving, an allocation coming back, the deployment scaled to zero).

``python -m reconciler.gateway.holder --recipe R --port P --gateway-port G --timeout T --prefix DIR``

The gateway's nginx sends a request here when the deployment has no frontend (its config's only
upstream) or when every frontend failed it (a ``backup`` server: a refused connection, a 503). The
holder:

- counts it (``GET /holder/stats``: ``held`` now, ``received`` in all): for a deployment that scales
  to zero the reconciler's autoscaler reads that as demand and brings it back (the wake-up);
- waits for the gateway to list a Ready frontend again (its ``/gateway/health``, which the
  reconciler confirms after each reload), then sends the request to it and streams the answer
  back. A refused connection or a 503 before any byte (a frontend whose workers are not routed
  yet) is tried again until the deadline: nothing has reached the client, nothing is duplicated;
- after ``--timeout`` seconds answers 503 with a JSON body saying why and the expected wait, and
  ``Retry-After``. The expected wait is what the reconciler last wrote in ``DIR/wake.json``
  (Slurm's expected start, the worker's last launch-to-Ready); unknown: the hold period.

The front door (``DIR/door.json``, written by the reconciler, read again when it changes): with a
keys file (``reconcile.gateway.api_keys``) nginx asks ``GET /holder/auth`` before it passes a
request anywhere (``auth_request``): 204 for a key in the file, 401 otherwise; a request that
reaches the holder itself is checked again (the port is reachable from this host). And what it
holds is capped (``maxHeld`` requests, ``maxHeldBytes`` of bodies): beyond, 503 with
``Retry-After`` at once, nothing read or counted as demand.

It runs next to nginx on the reconciler's host (shell/gateway/host.py starts and adopts it) and exits
by itself when its gateway's directory is removed. It imports nothing of the controller.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import signal
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp
from aiohttp import web

from reconciler.gateway.keys import KeyFile

POLL_S = 0.2  # how often the gateway's list of frontends is read while requests wait
BUSY_S = (0.5, 4.0)  # after a frontend's own 503 (overloaded, no worker): the first wait, doubling to this
DRAIN_S = 30.0  # told to stop (SIGTERM): what it relays may finish this long, no new request is taken
MAX_HELD = 1024  # requests held at once, by default (reconcile.gateway.max_held_requests)
MAX_HELD_BYTES = 256 * 1024 * 1024  # their bodies, by default (reconcile.gateway.max_held_mb)
HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "upgrade", "host",
       "content-length", "trailer", "proxy-authenticate", "proxy-authorization"}


@dataclass
class Holder:
    recipe: str
    gateway_port: int
    timeout: float
    prefix: Path
    held: int = 0
    received: int = 0
    forwarded: int = 0
    timed_out: int = 0
    relaying: int = 0  # answers being streamed back now
    stopping: bool = False  # told to stop: what waits for a frontend is answered its 503 now
    refused: int = 0  # turned away: over the cap on held requests or bytes
    held_bytes: int = 0
    _rr: int = 0
    _hold: tuple[float, float] | None = None  # (hold.json's mtime, its timeout)
    _door: tuple[float, dict] | None = None  # (door.json's mtime, its settings)
    _keys: KeyFile | None = None

    def door(self) -> dict:
        """The front door's settings (``door.json``): keys file and caps; defaults when absent."""
        path = self.prefix / "door.json"
        try:
            mtime = path.stat().st_mtime_ns
            if self._door is None or self._door[0] != mtime:
                doc = json.loads(path.read_text())
                self._door = (mtime, doc if isinstance(doc, dict) else {})
            return self._door[1]
        except (OSError, ValueError):
            return {}

    def keyfile(self) -> KeyFile | None:
        """The keys file the door names (None: no keys, the gateway is open)."""
        where = self.door().get("keys")
        if not isinstance(where, str) or not where:
            return None
        if self._keys is None or str(self._keys.path) != where:
            self._keys = KeyFile(Path(where))
        return self._keys

    def admitted(self, req: web.Request) -> bool:
        """No keys file, or a key of it in ``Authorization: Bearer``."""
        kf = self.keyfile()
        if kf is None:
            return True
        label = kf.admits(req.headers.get("Authorization"))
        if kf.error and kf.error != getattr(self, "_said", None):
            print(f"keys: {kf.error}: every request is refused until it is fixed", flush=True)
            self._said = kf.error
        return label is not None

    def cap(self, name: str, default: int) -> int:
        v = self.door().get(name)
        return v if isinstance(v, int) and v > 0 else default

    def hold_s(self) -> float:
        """The hold now: ``hold.json`` (the reconciler rewrites it on an edit), else ``--timeout``."""
        path = self.prefix / "hold.json"
        try:
            mtime = path.stat().st_mtime
            if self._hold is None or self._hold[0] != mtime:
                t = float(json.loads(path.read_text())["timeout"])
                self._hold = (mtime, t if 0 < t <= 3600 else self.timeout)
            return self._hold[1]
        except (OSError, ValueError, KeyError, TypeError):
            return self.timeout

    async def upstreams(self, session: aiohttp.ClientSession) -> list[str]:
        """The frontends the gateway serves now (what the reconciler confirmed after its reload)."""
        try:
            async with session.get(f"http://127.0.0.1:{self.gateway_port}/gateway/health",
                                   timeout=aiohttp.ClientTimeout(total=2)) as r:
                doc = json.loads(await r.read())
            return [str(u) for u in doc.get("upstreams") or []]
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError, AttributeError):
            return []

    def wake(self) -> dict:
        """What the reconciler says of the wake-up (expected ready time, why); {} when unknown."""
        try:
            doc = json.loads((self.prefix / "wake.json").read_text())
            return doc if isinstance(doc, dict) else {}
        except (OSError, ValueError):
            return {}

    def refusal(self, waited: float) -> web.Response:
        w = self.wake()
        at = w.get("expectedReadyAt")
        left = max(1, math.ceil(at - time.time())) if isinstance(at, (int, float)) and at > time.time() else None
        why = str(w.get("why") or "no frontend answers: one is being started or moved")
        body = {"error": {
            "message": f"{self.recipe}: {why}; no frontend answered within the gateway's hold of "
                       f"{self.hold_s():g}s (waited {waited:.0f}s): retry later",
            "type": "service_unavailable", "code": 503,
            "expected_wait_seconds": left, "reason": why}}
        retry = left if left is not None else max(1, math.ceil(self.hold_s()))
        return web.json_response(body, status=503, headers={"Retry-After": str(retry)})

    async def stats(self, _req: web.Request) -> web.Response:
        return web.json_response({"recipe": self.recipe, "held": self.held, "received": self.received,
                                  "forwarded": self.forwarded, "timedOut": self.timed_out,
                                  "refused": self.refused, "heldBytes": self.held_bytes})

    async def auth(self, req: web.Request) -> web.Response:
        """nginx's ``auth_request``: 204 lets the request on, 401 answers it (nothing held, nothing woken)."""
        return web.Response(status=204) if self.admitted(req) else unauthorized(self.recipe)

    def over_cap(self, size: int) -> web.Response | None:
        """503 with Retry-After when one more request of ``size`` bytes would pass a cap."""
        most, most_bytes = self.cap("maxHeld", MAX_HELD), self.cap("maxHeldBytes", MAX_HELD_BYTES)
        if self.held < most and self.held_bytes + size <= most_bytes:
            return None
        self.refused += 1
        what = (f"{self.held} requests held (at most {most})" if self.held >= most else
                f"{self.held_bytes + size} bytes of held bodies (at most {most_bytes})")
        body = {"error": {"message": f"{self.recipe}: the gateway holds no more requests now: {what}; retry later",
                          "type": "service_unavailable", "code": 503}}
        return web.json_response(body, status=503, headers={"Retry-After": str(max(1, math.ceil(self.hold_s())))})

    async def hold(self, req: web.Request) -> web.StreamResponse:
        if not self.admitted(req):  # the holder's port is reachable from this host, around nginx
            return unauthorized(self.recipe)
        # nginx buffers the body and sends its length; a chunked one (sent here directly) is read
        # within aiohttp's own limit, then weighed
        size = req.content_length or 0
        if (no := self.over_cap(size)) is not None:
            return no
        self.received += 1
        self.held += 1
        self.held_bytes += size
        start = time.monotonic()
        try:
            body = await req.read()
        except BaseException:
            self.held -= 1
            self.held_bytes -= size
            raise
        if len(body) != size:  # chunked: weighed once read
            self.held_bytes += len(body) - size
            size = len(body)
        return await self._held(req, body, size, start)

    async def _held(self, req: web.Request, body: bytes, size: int, start: float) -> web.StreamResponse:
        headers = {k: v for k, v in req.headers.items() if k.lower() not in HOP}
        session: aiohttp.ClientSession = req.app["session"]
        busy = 0.0  # the wait after a frontend's own 503: backs off, so one request is not a flood
        try:
            while not self.stopping and (waited := time.monotonic() - start) < (hold := self.hold_s()):
                ups = await self.upstreams(session)
                refused = False
                for i in range(len(ups)):
                    up = ups[(self._rr + i) % len(ups)]
                    out = await self.forward(req, session, up, body, headers, hold - waited)
                    if isinstance(out, web.StreamResponse):
                        self._rr += 1
                        self.forwarded += 1
                        return out
                    refused |= out == "refused"
                if ups and not refused:  # every frontend answered 503 itself
                    busy = min(BUSY_S[1], busy * 2) if busy else BUSY_S[0]
                pause = POLL_S if refused or not ups else busy
                await asyncio.sleep(max(0.0, min(pause, hold - (time.monotonic() - start))))  # never past the hold
            self.timed_out += 1
            return self.refusal(time.monotonic() - start)
        finally:
            self.held -= 1
            self.held_bytes -= size

    async def forward(self, req: web.Request, session: aiohttp.ClientSession, up: str, body: bytes,
                      headers: dict, left: float) -> web.StreamResponse | str:
        """The answer streamed from ``up``; "refused" or "503" when nothing reached the client (tried
        again: the client has seen nothing)."""
        try:
            r = await session.request(req.method, f"http://{up}{req.rel_url}", data=body, headers=headers,
                                      timeout=aiohttp.ClientTimeout(total=None, sock_connect=2, sock_read=3600),
                                      allow_redirects=False, auto_decompress=False)
        except (aiohttp.ClientError, asyncio.TimeoutError):
            return "refused"
        try:
            if r.status == 503:
                await r.read()
                return "503"
            if r.status == 404:  # read whole: an empty one is a frontend that has no route for it yet
                body = await r.read()
                if not body.strip():
                    return "503"
                return web.Response(status=404, body=body, headers={
                    k: v for k, v in r.headers.items() if k.lower() not in HOP})
            self.relaying += 1
            try:
                resp = web.StreamResponse(status=r.status, reason=r.reason, headers={
                    k: v for k, v in r.headers.items() if k.lower() not in HOP})
                await resp.prepare(req)
                async for chunk in r.content.iter_any():
                    await resp.write(chunk)
                await resp.write_eof()
                return resp
            finally:
                self.relaying -= 1
        finally:
            r.release()


def unauthorized(recipe: str) -> web.Response:
    body = {"error": {"message": f"{recipe}: a valid API key is required (Authorization: Bearer <key>)",
                      "type": "authentication_error", "code": 401}}
    return web.json_response(body, status=401, headers={"WWW-Authenticate": 'Bearer realm="gateway"'})


def _identity(p: Path) -> tuple[int, int] | None:
    try:
        st = p.stat()
    except OSError:
        return None
    return st.st_dev, st.st_ino


async def watch_prefix(prefix: Path, stop: asyncio.Event) -> None:
    """Until the gateway's directory is removed (its recipe deleted, its state wiped — even if a new
    one is made at the same path: the directory itself, not its name) or SIGTERM comes."""
    mine = _identity(prefix)
    while _identity(prefix) == mine and mine is not None and not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), 2.0)
        except asyncio.TimeoutError:
            pass


async def serve(h: Holder, port: int) -> None:
    app = web.Application(client_max_size=64 * 1024 * 1024)
    # no pool limit: every held request relays its answer on a connection of its own for its whole
    # life, and the frontends' list is read beside them (aiohttp's default of 100 starved the 101st)
    app["session"] = aiohttp.ClientSession(auto_decompress=False, connector=aiohttp.TCPConnector(limit=0))
    app.router.add_get("/holder/stats", h.stats)
    app.router.add_get("/holder/auth", h.auth)
    app.router.add_route("*", "/{tail:.*}", h.hold)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=DRAIN_S)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port, backlog=4096)
    await site.start()
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    print(f"holder of {h.recipe} on 127.0.0.1:{port}, gateway :{h.gateway_port}, hold {h.hold_s():g}s", flush=True)
    try:
        await watch_prefix(h.prefix, stop)
        h.stopping = True  # what is relayed finishes; what waits is refused (503, Retry-After) at once
        # told to stop (replaced, its recipe deleted): the port is let go at once, what it holds
        # or relays may finish (bounded), as nginx's own graceful stop
        await site.stop()
        deadline = time.monotonic() + DRAIN_S
        while (h.held or h.relaying) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
    finally:
        await app["session"].close()
        await runner.cleanup()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m reconciler.gateway.holder")
    ap.add_argument("--recipe", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--gateway-port", type=int, required=True)
    ap.add_argument("--timeout", type=float, required=True)
    ap.add_argument("--prefix", type=Path, required=True)
    a = ap.parse_args(argv)
    if not (0 < a.port < 65536 and 0 < a.gateway_port < 65536 and 0 < a.timeout <= 3600):
        ap.error("port out of range or timeout not in (0, 3600]")
    asyncio.run(serve(Holder(a.recipe, a.gateway_port, a.timeout, a.prefix), a.port))


if __name__ == "__main__":
    main()
