"""A light stand-in engine and router for benchmarks: one process answering GET on many ports.

    python benchmarks/health_farm.py        # then write one port number per line to its stdin

Each port is acknowledged with "ok <port>" (or "err <port> <why>") on stdout. HTTP/1.1 with
keep-alive, like a real engine's server, so a prober that reuses connections can. One asyncio
loop, so thousands of "workers" cost one process and a few MB.

Any path answers 200 "ok", as an engine's /health does, except the built-in router's life
probe ``/health?life=a|b``: the reconciler reads a router as Ready only when the JSON body
names the life it asked for (``reconciler.shell.readiness.probe.probe_life``), so that is answered as
``reconciler.router`` answers it (``{"status": "ok", "life": "<life>"}``), and a frontend's
canary (``reconciler.shell.readiness.canary.canary``): ``GET /v1/models`` lists tick.py's model ``m`` and
``POST /v1/completions`` answers one token.

Its figures belong to docs/performance.md, section "One tick (benchmarks/tick.py)": it is
tick.py's stand-in, run at its smallest size by tests/test_benchmarks.py.
"""

from __future__ import annotations

import asyncio
import re
import resource
import sys

BODY = b"ok"
RESPONSE = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\n" + BODY
LIFE = re.compile(rb"^GET /health\?(?:[^ ]*&)?life=([ab])(?:[& ])")
LENGTH = re.compile(rb"\r\ncontent-length:\s*(\d+)", re.IGNORECASE)
MODELS = b'{"object": "list", "data": [{"id": "m", "object": "model"}]}'  # tick.py's recipes serve "m"
COMPLETION = b'{"object": "text_completion", "choices": [{"index": 0, "text": "k", "finish_reason": "length"}]}'


def _json(body: bytes) -> bytes:
    return (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)) + body


def answer(head: bytes) -> bytes:
    """The response to one request head: the router's life probe names its life, the canary's two
    requests are answered as a frontend would, anything else is "ok"."""
    if head.startswith(b"GET /v1/models "):
        return _json(MODELS)
    if head.startswith(b"POST /v1/completions "):
        return _json(COMPLETION)
    m = LIFE.match(head)
    if not m:
        return RESPONSE
    return _json(b'{"status": "ok", "life": "' + m.group(1) + b'"}')


async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            if not head:
                break
            length = LENGTH.search(head)
            if length:  # a request body (the canary's POST) is read, so keep-alive stays in step
                await reader.readexactly(min(int(length.group(1)), 1 << 20))
            writer.write(answer(head))
            await writer.drain()
            if b"connection: close" in head.lower():
                break
    except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
        pass
    finally:
        writer.close()


async def main() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    servers = []
    while line := await reader.readline():
        port = int(line)
        try:
            servers.append(await asyncio.start_server(serve, "127.0.0.1", port, reuse_address=True))
            sys.stdout.write(f"ok {port}\n")
        except OSError as e:
            sys.stdout.write(f"err {port} {e}\n")
        sys.stdout.flush()


if __name__ == "__main__":
    asyncio.run(main())
