"""What the gateway's API-key check (``reconcile.gateway.api_keys``) adds to a request.

``python benchmarks/gateway_keys.py [-n 1000] [--ports 45980-45999]``

A real nginx gateway (shell/gateway/host.py) in front of a real mocker, once open and once with a
keys file: ``GET /v1/models`` sequentially on one kept-alive connection, 200 requests of warm-up
then ``-n`` measured, two rounds. Prints p50, p99 and mean of each and the p50 difference.
"""

from __future__ import annotations

import argparse
import http.client
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from reconciler.core.ports import NodePortAllocator
from reconciler.drivers.state import StateDir
from reconciler.gateway.keys import line_for
from reconciler.shell.gateway import holder_supervisor
from reconciler.shell.gateway.host import Gateways
from reconciler.shell.gateway.record import facts, prefix_of
from reconciler.shell.gateway.sweep import master_pid

KEY = "sk-benchmark-gateway-key-0001"
WARMUP = 200


def mocker(tmp: Path) -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    p = subprocess.Popen([sys.executable, "-m", "reconciler.mocker", "--host", "127.0.0.1", "--port", str(port),
                          "--model-name", "m", "--speedup-ratio", "100"], stdout=open(tmp / "mocker.log", "wb"),
                         stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            http.client.HTTPConnection("127.0.0.1", port, timeout=1).request("GET", "/v1/models")
            return p, f"127.0.0.1:{port}"
        except OSError:
            time.sleep(0.1)
    raise SystemExit("the mocker did not start")


def measure(g: Gateways, ports: NodePortAllocator, name: str, up: str, door: dict | None, key: str | None,
            n: int) -> list[float]:
    g.sync(name, [up], ports, 1000.0, hold=None, door=door)
    if door and door.get("keys"):
        holder_supervisor.wait_listening(g._record(name)["holderPort"])
    host, port = facts(g.state.root, name)["url"].removeprefix("http://").split(":")
    c = http.client.HTTPConnection(host, int(port), timeout=30)
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    out = []
    for i in range(WARMUP + n):
        t = time.perf_counter()
        c.request("GET", "/v1/models", headers=headers)
        r = c.getresponse()
        r.read()
        if r.status != 200:
            raise SystemExit(f"{name}: {r.status}")
        if i >= WARMUP:
            out.append((time.perf_counter() - t) * 1e3)
    return sorted(out)


def show(x: list[float]) -> str:
    return f"p50 {statistics.median(x):.3f} ms  p99 {x[int(len(x) * .99)]:.3f} ms  mean {statistics.mean(x):.3f} ms"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=1000)
    ap.add_argument("--ports", default="45980-45999", help="the range the two gateways and the holder take")
    a = ap.parse_args()
    lo, hi = map(int, a.ports.split("-"))
    tmp = Path(tempfile.mkdtemp(prefix="gateway-keys-"))
    (tmp / "keys").write_text(line_for(KEY) + "\n")
    m, up = mocker(tmp)
    g = Gateways(StateDir(tmp / "state"), host="127.0.0.1")
    ports = NodePortAllocator(lo, hi)
    try:
        for rnd in range(2):
            plain = measure(g, ports, "open", up, None, None, a.n)
            keyed = measure(g, ports, "keyed", up, holder_supervisor.front_door(str(tmp / "keys"), 1024, 256), KEY, a.n)
            print(f"round {rnd}: open   {show(plain)}\nround {rnd}: keyed  {show(keyed)}\n"
                  f"round {rnd}: added  p50 {statistics.median(keyed) - statistics.median(plain):.3f} ms")
    finally:
        for name in g.known():
            if (pid := master_pid(prefix_of(g.state.root, name))) is not None:
                os.kill(pid, signal.SIGQUIT)
            holder_supervisor.stop(prefix_of(g.state.root, name))
        m.terminate()


if __name__ == "__main__":
    main()
