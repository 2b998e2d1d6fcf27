"""What the gateway tests share: the Gateways fixture over a real nginx, an upstream that drops
requests, a streamed call, and the end-to-end checks (events, a completion, the only frontend killed)."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import threading

import pytest

from harness import Harness, _ranges, scancel
from helpers import post, wait_until
from reconciler.core.ports import NodePortAllocator
from reconciler.drivers.state import StateDir
from reconciler.shell.gateway.host import Gateways
from reconciler.shell.gateway.record import prefix_of
from reconciler.shell.gateway.sweep import master_pid


CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


def call(url: str, path: str = "/v1/chat/completions", key: str | None = None, body: bytes | None = None,
         method: str = "POST", timeout: float = 60) -> tuple[int, dict, bytes]:
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    data = body if body is not None else (json.dumps(CHAT).encode() if method == "POST" else None)
    conn.request(method, path, body=data, headers=headers)
    r = conn.getresponse()
    return r.status, dict(r.getheaders()), r.read()


class Bg(threading.Thread):
    def __init__(self, *a, **kw):
        super().__init__(daemon=True)
        self.a, self.kw, self.out = a, kw, None

    def run(self) -> None:
        self.out = call(*self.a, **self.kw)


def _ports() -> NodePortAllocator:
    lo = next(_ranges)
    return NodePortAllocator(lo, lo + 100)


def _hp(url: str) -> str:
    return url.removeprefix("http://")


@pytest.fixture
def gw(tmp_path):
    state = StateDir(tmp_path / "state")
    g = Gateways(state, host="127.0.0.1")
    yield g
    for name in g.known():
        pid = master_pid(prefix_of(state.root, name))
        if pid:
            os.kill(pid, signal.SIGQUIT)
            wait_until(lambda: master_pid(prefix_of(state.root, name)) is None, what="nginx gone")


class _Drops(threading.Thread):
    """An upstream that reads a request and closes without answering: it *started* the request.
    ``answer``: it answers that instead (a frontend with no worker answers 503)."""

    def __init__(self, answer: bytes | None = None, sock: socket.socket | None = None):
        super().__init__(daemon=True)
        self.sock = sock or socket.socket()
        if sock is None:
            self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.seen = 0
        self.answer = answer

    @property
    def addr(self) -> str:
        return "127.0.0.1:%d" % self.sock.getsockname()[1]

    def run(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            c.recv(65536)
            self.seen += 1
            if self.answer:
                c.sendall(self.answer)
            c.close()


def _serves(url: str) -> bool:
    return post(url + "/v1/chat/completions", CHAT, timeout=10)[0] == 200


def _only_frontend_killed(h: Harness, name: str) -> tuple[int, int]:
    """A client loop through the gateway while the recipe's only frontend is killed: (sent after
    the kill, failed but for answers cut mid-way). A request whose answer had begun when its
    frontend was killed is not the gateway's to save: nginx retries, and the holder takes, only
    what no frontend began to answer (its client sees the body end early: IncompleteRead)."""
    import time

    from benchmarks.traffic import Traffic

    steps = h.wait_steps(name, {"agg_0", "frontend_0"})
    endpoint = h.wait_ready(name)["endpoint"]
    wait_until(lambda: _serves(endpoint), timeout=20, what="a completion through the gateway")
    traffic = Traffic(endpoint, timeout=90).start()  # a held request waits out the relaunch
    try:
        assert traffic.wait_ok(time.monotonic(), 20)
        killed = time.monotonic()
        scancel(steps["frontend_0"][0])
        wait_until(lambda: h.steps(name).get("frontend_0", steps["frontend_0"]) != steps["frontend_0"], timeout=60,
                   what="frontend relaunched")
        back = traffic.wait_ok(time.monotonic(), 30)
        assert back is not None, traffic.failed()[-3:]
        wait_until(lambda: len([o for o in traffic.between(back, time.monotonic()) if o.ok]) >= 20, timeout=30,
                   what="20 answers after the relaunch")
    finally:
        traffic.stop()
    after = [o for o in traffic.outcomes if o.at >= killed]
    failed = [o for o in after if not o.ok]
    cut = [o for o in failed if o.code == 0 and o.detail.startswith("IncompleteRead")]
    if failed:
        print(f"\n{name}: {len(cut)} answer(s) cut mid-way by the kill; the failures: "
              f"{[(o.code, o.detail[:120]) for o in failed[:3]]}")
    return len(after), len(failed) - len(cut)


class Call(threading.Thread):
    """One streamed chat completion through the gateway, in the background."""

    def __init__(self, url: str, max_tokens: int = 8):
        super().__init__(daemon=True)
        self.host, self.port = url.removeprefix("http://").split(":")
        self.max_tokens = max_tokens
        self.status: int | None = None
        self.headers: dict = {}
        self.body = b""

    def run(self) -> None:
        conn = http.client.HTTPConnection(self.host, int(self.port), timeout=120)
        conn.request("POST", "/v1/chat/completions", body=json.dumps(
            {**CHAT, "max_tokens": self.max_tokens, "stream": True}), headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        self.status, self.headers, self.body = r.status, dict(r.getheaders()), r.read()
