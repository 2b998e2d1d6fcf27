"""A light stand-in engine for benchmarks: one process answering GET <any path> with 200 on many ports.

    python benchmarks/health_farm.py        # then write one port number per line to its stdin

Each port is acknowledged with "ok <port>" (or "err <port> <why>") on stdout. HTTP/1.1 with
keep-alive, like a real engine's server, so a prober that reuses connections can. One asyncio
loop, so thousands of "workers" cost one process and a few MB.
"""

from __future__ import annotations

import asyncio
import resource
import sys

BODY = b"ok"
RESPONSE = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\n" + BODY


async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            if not head:
                break
            writer.write(RESPONSE)
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
