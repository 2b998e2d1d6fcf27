"""Small HTTP and process helpers for tests (stdlib only)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from load import scaled


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url: str, timeout: float = 5) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def post(url: str, body, timeout: float = 30) -> tuple[int, bytes]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def sse_events(raw: bytes) -> list:
    out = []
    for block in raw.decode().split("\n\n"):
        block = block.strip()
        if block.startswith("data: "):
            payload = block[6:]
            out.append(payload if payload == "[DONE]" else json.loads(payload))
    return out


class NotYet(Exception):
    """Raised by a poll's own condition for "not yet" (a file not written yet, a command that
    failed for now): retried, like a false result. Anything else but an AssertionError is too."""


def wait_until(fn, timeout: float = 20, interval: float = 0.05, what="condition"):
    """Poll ``fn`` until it returns something true. Only its own "not yet" is retried: a false
    result, or an exception such as a refused connection or a file not there yet. An
    AssertionError is an invariant that failed (a duplicate step, say) and fails the test at
    once: a poll must never retry it until it happens to hold. ``what`` may be a callable, asked
    only on a timeout (a log read then, not when the wait began)."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = fn()
            if last:
                return last
        except AssertionError:
            raise
        except Exception as e:  # noqa: BLE001 - not yet: keep polling until the deadline
            last = e
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what() if callable(what) else what} (last: {last!r})")


def metric(url: str, name: str) -> float:
    _, body = get(url + "/metrics")
    for line in body.decode().splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    raise KeyError(name)


class Proc:
    """A python -m module subprocess with its output in a file."""

    def __init__(self, module: str, *args: str, log: Path):
        self.log = log
        self.fh = open(log, "wb")
        self.p = subprocess.Popen([sys.executable, "-m", module, *args], stdout=self.fh, stderr=subprocess.STDOUT)

    def output(self) -> str:
        self.fh.flush()
        return self.log.read_text()

    def stop(self) -> None:
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(5)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.fh.close()


def start_mocker(tmp_path: Path, *args: str, name: str = "mocker") -> tuple[Proc, str]:
    port = free_port()
    proc = Proc("reconciler.mocker", "--host", "127.0.0.1", "--port", str(port), "--model-name", "m", *args,
                log=tmp_path / f"{name}-{port}.log")
    url = f"http://127.0.0.1:{port}"
    # its imports alone take seconds on two busy cores (30 s were seen at load 20): bounded by the load factor
    wait_until(lambda: proc.p.poll() is not None or get(url + "/metrics")[0] == 200, timeout=scaled(60),
               what=f"{name} up")
    assert proc.p.poll() is None, proc.output()
    return proc, url


def start_router(tmp_path: Path, endpoints: Path, *args: str) -> tuple[Proc, str]:
    """The built-in router on a free port of this host, once it answers /health. Bounded as
    start_mocker is: three router starts waited 20 s in a soak run at load 17-25 (2026-12-08), one
    without having logged its first line."""
    port = free_port()
    proc = Proc("reconciler.router", "--host", "127.0.0.1", "--port", str(port), "--endpoints-file", str(endpoints),
                *args, log=tmp_path / "router.log")
    url = f"http://127.0.0.1:{port}"
    wait_until(lambda: proc.p.poll() is not None or get(url + "/health")[0] == 200, timeout=scaled(60),
               what="router up")
    assert proc.p.poll() is None, proc.output()
    return proc, url


def write_endpoints(path, workers):
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"workers": workers}))
    tmp.replace(path)
