"""Clients of a serving endpoint: a bounded background chat loop, the model list, a chat, metrics."""

from __future__ import annotations

import http.client
import json
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit

from helpers import get, post, wait_until


def labelled_metric(text: str, name: str, **labels: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            have = dict(re.findall(r'(\w+)="([^"]*)"', line.split("}")[0])) if "{" in line else {}
            if all(have.get(k) == v for k, v in labels.items()):
                return float(line.rsplit(" ", 1)[1])
    return None


def chat(endpoint: str, model: str) -> tuple[int, bytes]:
    return post(endpoint + "/v1/chat/completions",
                {"model": model, "messages": [{"role": "user", "content": "hello there"}], "max_tokens": 8},
                timeout=20)


def served(endpoint: str) -> str | None:
    try:
        status, body = get(endpoint + "/v1/models", timeout=3)
    except OSError:
        return None
    data = json.loads(body).get("data", []) if status == 200 else []
    return data[0]["id"] if data else None


def instances(endpoint: str) -> int:
    try:
        status, body = get(endpoint + "/health", timeout=3)
        doc = json.loads(body)
    except (OSError, ValueError):
        return -1
    return sum(1 for i in doc.get("instances", []) if i.get("endpoint") == "generate")


def serves(endpoint: str, model: str) -> bool:
    try:
        return chat(endpoint, model)[0] == 200
    except OSError:
        return False


class Client(threading.Thread):
    """Sequential chat completions through the router until stopped or ``limit`` sent (bounded)."""

    def __init__(self, endpoint: str, limit: int = 5000, max_tokens: int = 4, timeout: float = 10, pause: float = 0.0):
        """``pause``: seconds between one answer and the next request (0: back to back)."""
        super().__init__(daemon=True)
        u = urlsplit(endpoint)
        self.host, self.port = u.hostname, u.port
        self.limit, self.max_tokens, self.timeout, self.pause = limit, max_tokens, timeout, pause
        self.ok = 0
        self.failed: list[str] = []
        self.halt = threading.Event()

    def run(self) -> None:
        body = json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": self.max_tokens}).encode()
        while not self.halt.is_set() and self.ok + len(self.failed) < self.limit:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
            try:
                conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
                r = conn.getresponse()
                data = r.read()
                if r.status == 200:
                    self.ok += 1
                else:
                    self.failed.append(f"{r.status}: {data[:200]!r}")
            except (OSError, http.client.HTTPException) as e:
                self.failed.append(repr(e))
            finally:
                conn.close()
            if self.pause:
                self.halt.wait(self.pause)

    def wait_more(self, count: int, what: str) -> None:
        """Wait until ``count`` more requests than now have been answered."""
        n = self.ok
        wait_until(lambda: self.ok >= n + count, what=what)


def stop(*clients: Client, join: float = 40) -> None:
    """Halt every client first, then wait for each (the request it has in flight ends first)."""
    for c in clients:
        c.halt.set()
    for c in clients:
        c.join(join)


@contextmanager
def sending(*clients: Client, join: float = 40) -> Iterator[tuple[Client, ...]]:
    """The clients started, in order, and stopped however the block ends (a failed assertion must
    not leave a thread sending into the next test's cluster)."""
    for c in clients:
        c.start()
    try:
        yield clients
    finally:
        stop(*clients, join=join)
