"""What the gateway's API-key check (``reconcile.gateway.api_keys``) adds to a request.

    python benchmarks/gateway_keys.py [-n 1000] [--ports 45980-45999]
    python benchmarks/gateway_keys.py --smoke   # 50 requests, one round: CI runs it

Its table is docs/performance.md, section "The gateway's API-key check (benchmarks/gateway_keys.py)".

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


def row(rnd: int, gateway: str, x: list[float]) -> str:
    return (f"{rnd:>5} {gateway:>7} {statistics.median(x):>8.3f} {x[int(len(x) * .99)]:>8.3f} "
            f"{statistics.mean(x):>8.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=1000)
    ap.add_argument("--ports", default=os.environ.get("RECONCILER_PORT_RANGE", "45980-45999"),
                    help="the range the two gateways and the holder take")
    ap.add_argument("--smoke", action="store_true", help="50 requests, one round: that it runs")
    a = ap.parse_args()
    n, rounds = (50, 1) if a.smoke else (a.n, 2)
    if not 1 <= n <= 1_000_000:
        raise SystemExit(f"-n {n}: between 1 and 1,000,000")
    lo, hi = map(int, a.ports.split("-"))
    tmp = Path(tempfile.mkdtemp(prefix="gateway-keys-"))
    (tmp / "keys").write_text(line_for(KEY) + "\n")
    m, up = mocker(tmp)
    g = Gateways(StateDir(tmp / "state"), host="127.0.0.1")
    ports = NodePortAllocator(lo, hi)
    try:
        print(f"{'round':>5} {'gateway':>7} {'p50 ms':>8} {'p99 ms':>8} {'mean ms':>8}")
        for rnd in range(rounds):
            plain = measure(g, ports, "open", up, None, None, n)
            keyed = measure(g, ports, "keyed", up, holder_supervisor.front_door(str(tmp / "keys"), 1024, 256), KEY, n)
            print(f"{row(rnd, 'open', plain)}\n{row(rnd, 'keyed', keyed)}\n"
                  f"{rnd:>5} {'added':>7} {statistics.median(keyed) - statistics.median(plain):>8.3f}")
    finally:
        for name in g.known():
            if (pid := master_pid(prefix_of(g.state.root, name))) is not None:
                os.kill(pid, signal.SIGQUIT)
            holder_supervisor.stop(prefix_of(g.state.root, name))
        m.terminate()


if __name__ == "__main__":
    main()
