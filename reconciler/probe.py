"""Health probes: GET http://<node>:<port><path>, all in parallel, short timeouts."""

from __future__ import annotations

import http.client
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Iterable

from reconciler.units import Unit

TIMEOUT = 1.0
_pool = ThreadPoolExecutor(max_workers=32, thread_name_prefix="probe")


def probe_one(host: str, port: int, path: str, timeout: float = TIMEOUT) -> bool:
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request("GET", path)
        return conn.getresponse().status == 200
    except Exception:  # noqa: BLE001 - OSError, HTTPException, a bad host name: not healthy
        return False
    finally:
        conn.close()


def probe_units(units: Iterable[Unit]) -> dict[tuple[str, str, int], bool]:
    todo = [u for u in units if u.health_port]
    futures = {u.key: _pool.submit(probe_one, u.nodes[0], u.health_port, u.health_path) for u in todo}
    return {k: f.result() for k, f in futures.items()}
