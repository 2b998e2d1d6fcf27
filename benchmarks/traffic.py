"""A client loop through an endpoint: what the continuity benchmark and its tests measure with.

One or more threads send small chat completions back to back; every answer is recorded with its
time, so a fault's cost is read off afterwards: requests sent and failed, and the longest gap
between two successful answers (the time nobody was served).
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit


def body(model: str | None) -> bytes:
    doc: dict = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    if model:
        doc["model"] = model  # Dynamo's frontend requires it; the built-in router takes any
    return json.dumps(doc).encode()


@dataclass
class Outcome:
    at: float  # monotonic time the answer (or the error) came
    ok: bool
    code: int
    detail: str = ""
    sent: float = 0.0  # monotonic time the request was sent


@dataclass
class Traffic:
    """``rate``: requests per second per thread at most (0: back to back)."""

    url: str
    threads: int = 1
    rate: float = 0.0
    timeout: float = 30.0
    model: str | None = None
    outcomes: list[Outcome] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._workers = [threading.Thread(target=self._run, daemon=True) for _ in range(self.threads)]

    def start(self) -> Traffic:
        self.started = time.monotonic()
        for t in self._workers:
            t.start()
        return self

    def stop(self) -> Traffic:
        self._stop.set()
        for t in self._workers:
            t.join(self.timeout + 5)
        return self

    def _run(self) -> None:
        parts = urlsplit(self.url)
        payload = body(self.model)
        while not self._stop.is_set():
            t0 = time.monotonic()
            code, detail = 0, ""
            try:
                conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=self.timeout)
                conn.request("POST", "/v1/chat/completions", body=payload, headers={"Content-Type": "application/json"})
                r = conn.getresponse()
                raw = r.read()
                code = r.status
                detail = "" if code == 200 else raw[:160].decode(errors="replace")
                conn.close()
            except (OSError, http.client.HTTPException) as e:
                detail = f"{type(e).__name__}: {e}"
            with self._lock:
                self.outcomes.append(Outcome(time.monotonic(), code == 200, code, detail, t0))
            if self.rate > 0:
                self._stop.wait(max(0.0, 1.0 / self.rate - (time.monotonic() - t0)))

    # ---------------------------------------------------------------- figures
    def between(self, start: float, end: float) -> list[Outcome]:
        with self._lock:
            return [o for o in self.outcomes if start <= o.at <= end]

    def sent(self) -> int:
        return len(self.outcomes)

    def failed(self) -> list[Outcome]:
        with self._lock:
            return [o for o in self.outcomes if not o.ok]

    def longest_gap(self, start: float | None = None, end: float | None = None) -> float:
        """The longest time between two successful answers (from ``start``, to ``end``)."""
        with self._lock:
            oks = sorted(o.at for o in self.outcomes if o.ok)
        lo = self.started if start is None else start
        hi = time.monotonic() if end is None else end
        points = [lo, *[t for t in oks if lo <= t <= hi], hi]
        return max((b - a for a, b in zip(points, points[1:])), default=0.0)

    def wait_ok(self, after: float, timeout: float) -> float | None:
        """The time of the first successful answer after ``after`` (None after ``timeout`` seconds)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                hit = next((o.at for o in self.outcomes if o.ok and o.at > after), None)
            if hit is not None:
                return hit
            time.sleep(0.02)
        return None

    def recovered(self, since: float, gap: float = 1.0) -> float | None:
        """When answers came back after the last disturbance since ``since`` — a failed request, or
        no successful answer for over ``gap`` seconds (a request the gateway held) — or ``since``
        when there was none; None while one lasts (the last answer failed, or none for ``gap``)."""
        with self._lock:
            outs = [o for o in self.outcomes if o.at >= since]
        back: float | None = since
        prev = since
        for o in outs:
            if not o.ok:
                back = None
            else:
                if back is None or o.at - prev > gap:
                    back = o.at
                prev = o.at
        return back if time.monotonic() - prev <= gap else None
