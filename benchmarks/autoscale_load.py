"""The load and the measuring helpers of benchmarks/autoscale.py (not a benchmark of its own).

A ``Profile`` is a client count over time (``step``: 1, then --clients, then 1; ``ramp``: 1, rising one
client at a time to --clients, holding, falling back to 1, then 1), ``Load`` drives streaming
clients to that count, ``Client`` records each request's outcome, TTFT and mean ITL.
"""

from __future__ import annotations

import http.client
import json
import math
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit


class Client(threading.Thread):
    """Streaming chat completions one after another until stopped: (ok, ttft s, mean itl s) each."""

    def __init__(self, endpoint: str, max_tokens: int):
        super().__init__(daemon=True)
        u = urlsplit(endpoint)
        self.host, self.port, self.max_tokens = u.hostname, u.port, max_tokens
        self.results: list[tuple[bool, float, float, float]] = []  # (ok, ttft, mean itl, sent at)
        self.halt = threading.Event()
        self.timeout = 60.0  # a held request (scale to zero) waits for a worker: longer

    def run(self) -> None:
        while not self.halt.is_set():
            self.once()

    def once(self) -> None:
        body = json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": self.max_tokens,
                           "stream": True}).encode()
        t0 = time.monotonic()
        times: list[float] = []
        ok = False
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        try:
            conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
            r = conn.getresponse()
            if r.status == 200:
                for line in r:
                    if line.startswith(b"data: ") and b'"content"' in line:
                        times.append(time.monotonic())
                    elif line.startswith(b"data: [DONE]"):
                        ok = True
            else:
                r.read()
        except (OSError, http.client.HTTPException):
            ok = False
        finally:
            conn.close()
        ttft = times[0] - t0 if times else float("inf")
        itl = (times[-1] - times[0]) / (len(times) - 1) if len(times) > 1 else 0.0
        self.results.append((ok and bool(times), ttft, itl, t0))


@dataclass(frozen=True)
class Profile:
    name: str
    total: float  # seconds of load
    count: Callable[[float], int]  # clients wanted t seconds after the load's start
    edges: tuple[tuple[str, float], ...]  # (phase, its start in seconds) for the misses per phase


def step(low: float, high: float, tail: float, clients: int, first: float = 15.0) -> Profile:
    """1 client for ``low`` s, ``clients`` for ``high`` s, 1 for ``tail`` s; the misses of the high
    phase's first ``first`` s (the wait for the added workers) are counted apart."""
    def count(t: float) -> int:
        return clients if low <= t < low + high else 1
    first = min(first, high)
    return Profile("step", low + high + tail, count,
                   (("low", 0.0), (f"step +{first:g} s", low), ("high", low + first), ("tail", low + high)))


def ramp(low: float, rise: float, hold: float, fall: float, tail: float, clients: int) -> Profile:
    """1 client for ``low`` s; one more every ``rise / (clients - 1)`` s (the first at the rise's start)
    up to ``clients``; held for ``hold`` s; one fewer at the same pace over ``fall`` s; 1 for ``tail`` s."""
    n = max(1, clients - 1)

    def count(t: float) -> int:
        if t < low:
            return 1
        if t < low + rise:
            return 1 + min(n, 1 + int((t - low) / (rise / n)))
        if t < low + rise + hold:
            return clients
        if t < low + rise + hold + fall:
            return clients - min(n, 1 + int((t - low - rise - hold) / (fall / n)))
        return 1
    return Profile("ramp", low + rise + hold + fall + tail, count,
                   (("low", 0.0), ("rise", low), ("hold", low + rise), ("fall", low + rise + hold),
                    ("tail", low + rise + hold + fall)))


class Load(threading.Thread):
    """Streaming clients at the count ``profile`` asks for (checked every 0.2 s); a client beyond it is
    halted and finishes its request. ``first_increase``: monotonic time the count first rose."""

    def __init__(self, endpoint: str, tokens: int, profile: Profile):
        super().__init__(daemon=True)
        self.endpoint, self.tokens, self.profile = endpoint, tokens, profile
        self.active: list[Client] = []
        self.stopped: list[Client] = []
        self.first_increase: float | None = None
        self.first_increase_wall: float | None = None
        self.t0 = time.monotonic()

    def run(self) -> None:
        self.t0 = time.monotonic()
        while (t := time.monotonic() - self.t0) < self.profile.total:
            want = self.profile.count(t)
            if self.active and want > len(self.active) and self.first_increase is None:
                self.first_increase, self.first_increase_wall = time.monotonic(), time.time()
            while len(self.active) < want:
                c = Client(self.endpoint, self.tokens)
                c.start()
                self.active.append(c)
            while len(self.active) > want:
                c = self.active.pop()
                c.halt.set()
                self.stopped.append(c)
            time.sleep(0.2)
        for c in self.active:
            c.halt.set()
        self.stopped += self.active
        self.active = []
        for c in self.stopped:
            c.join(60)

    def results(self) -> list[tuple[bool, float, float, float]]:
        return [r for c in self.stopped + self.active for r in c.results]

    def misses(self, good: list[bool]) -> dict[str, list[int]]:
        """phase -> [requests sent in it, of which missed]."""
        out = {phase: [0, 0] for phase, _ in self.profile.edges}
        for (_, _, _, sent), g in zip(self.results(), good):
            phase = [n for n, t in self.profile.edges if sent - self.t0 >= t or t == 0.0][-1]
            out[phase][0] += 1
            out[phase][1] += 0 if g else 1
        return out


def need_floor(profile: Profile, per: float, most: int) -> float:
    """Percent of a fixed ``most`` workers' GPU-seconds used by a count that follows the load at once,
    ``ceil(clients / per)`` within [1, most] (``per``: clients a worker carries at the target)."""
    steps = int(profile.total / 0.5)
    used = sum(min(most, max(1, math.ceil(profile.count(i * 0.5) / per))) for i in range(steps))
    return 100.0 * used / (most * max(steps, 1))


def read_json(p: Path) -> dict:
    try:
        return json.loads(p.read_text())
    except (FileNotFoundError, ValueError):
        return {}


def held_gpus(name: str) -> int | None:
    """GPUs the recipe's Slurm jobs hold now (squeue: gres per node x nodes), None off Slurm."""
    try:
        out = subprocess.run(["squeue", "-h", "-o", "%j|%b|%D"], capture_output=True, text=True, timeout=5).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    total = 0
    for line in out.splitlines():
        job, gres, nodes = (line.split("|") + ["", "", ""])[:3]
        if f":{name}:" in job and gres.rsplit(":", 1)[-1].isdigit() and nodes.isdigit():
            total += int(gres.rsplit(":", 1)[-1]) * int(nodes)
    return total
