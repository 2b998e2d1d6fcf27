"""Throughput and latency of one mocker engine, directly and through the router.

    python benchmarks/mocker_bench.py [--concurrency 64] [--duration 10] [--max-tokens 64] [--speedup 0]
    python benchmarks/mocker_bench.py --smoke      # its smallest size (2 streams, 1 s): CI runs it

Its table is docs/performance.md, section "One engine and the router (benchmarks/mocker_bench.py)".

Starts one engine and one router on loopback, drives N concurrent streaming clients
for a fixed time against each, and prints requests/s, output tokens/s, TTFT and ITL
p50/p99, and the router's overhead as ratios (through router / direct). Asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def wait_up(url: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession() as s:
        while time.monotonic() < deadline:
            try:
                async with s.get(url + "/health") as r:
                    if r.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
    raise SystemExit(f"{url} did not come up")


def pct(xs: list[float], p: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))]


async def drive(url: str, concurrency: int, duration: float, max_tokens: int) -> dict:
    ttfts: list[float] = []
    itls: list[float] = []
    tokens = 0
    done = 0
    errors = 0
    body = {"messages": [{"role": "user", "content": "benchmark prompt " * 8}], "max_tokens": max_tokens, "stream": True}
    stop_at = time.monotonic() + duration

    async def client(session: aiohttp.ClientSession) -> None:
        nonlocal tokens, done, errors
        while time.monotonic() < stop_at:
            t0 = time.monotonic()
            last = None
            try:
                async with session.post(url + "/v1/chat/completions", json=body) as r:
                    if r.status != 200:
                        errors += 1
                        continue
                    async for line in r.content:
                        if not line.startswith(b"data: {"):
                            continue
                        chunk = json.loads(line[6:])
                        if not chunk["choices"] or not chunk["choices"][0]["delta"].get("content"):
                            continue
                        now = time.monotonic()
                        if last is None:
                            ttfts.append(now - t0)
                        else:
                            itls.append(now - last)
                        last = now
                        tokens += 1
                done += 1
            except aiohttp.ClientError:
                errors += 1

    conn = aiohttp.TCPConnector(limit=0)
    t_start = time.monotonic()
    async with aiohttp.ClientSession(connector=conn) as session:
        await asyncio.gather(*(client(session) for _ in range(concurrency)))
    wall = time.monotonic() - t_start
    return {
        "req_s": done / wall, "tok_s": tokens / wall, "errors": errors,
        "ttft_p50": pct(ttfts, 50), "ttft_p99": pct(ttfts, 99), "itl_p50": pct(itls, 50), "itl_p99": pct(itls, 99),
        "itl_mean": statistics.fmean(itls) if itls else float("nan"),
    }


HEADER = (f"{'path':>8} {'streams':>7} {'req/s':>8} {'out tok/s':>9} {'TTFT p50 ms':>11} {'TTFT p99 ms':>11} "
          f"{'ITL p50 ms':>10} {'ITL p99 ms':>10} {'errors':>6}")


def show(name: str, streams: int, r: dict) -> None:
    print(f"{name:>8} {streams:>7} {r['req_s']:8.1f} {r['tok_s']:9.0f} {r['ttft_p50'] * 1e3:11.2f} "
          f"{r['ttft_p99'] * 1e3:11.2f} {r['itl_p50'] * 1e3:10.2f} {r['itl_p99'] * 1e3:10.2f} {r['errors']:>6}", flush=True)


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--speedup", type=float, default=0.0, help="engine speedup ratio; 0 = no simulated delay")
    ap.add_argument("--smoke", action="store_true", help="the smallest size (2 streams, 1 s, 8 tokens): that it runs")
    a = ap.parse_args()
    if a.smoke:
        a.concurrency, a.duration, a.max_tokens = 2, 1.0, 8
    tmp = Path(tempfile.mkdtemp(prefix="mocker-bench-"))
    eport, rport = free_port(), free_port()
    eng_url, rt_url = f"http://127.0.0.1:{eport}", f"http://127.0.0.1:{rport}"
    (tmp / "endpoints.json").write_text(json.dumps({"workers": [{"url": eng_url, "role": "agg"}]}))
    procs = [
        subprocess.Popen([sys.executable, "-m", "reconciler.mocker", "--host", "127.0.0.1", "--port", str(eport),
                          "--speedup-ratio", str(a.speedup), "--max-num-seqs", str(max(256, a.concurrency))],
                         stdout=subprocess.DEVNULL),
        subprocess.Popen([sys.executable, "-m", "reconciler.router", "--host", "127.0.0.1", "--port", str(rport),
                          "--endpoints-file", str(tmp / "endpoints.json")], stdout=subprocess.DEVNULL),
    ]
    try:
        await wait_up(eng_url)
        await wait_up(rt_url)
        await drive(eng_url, 4, 1.0 if not a.smoke else 0.2, 8)  # warm-up
        print(f"mocker benchmark: {a.concurrency} streams x {a.duration:g}s, max_tokens {a.max_tokens}, speedup {a.speedup:g}")
        print(HEADER)
        direct = await drive(eng_url, a.concurrency, a.duration, a.max_tokens)
        show("direct", a.concurrency, direct)
        routed = await drive(rt_url, a.concurrency, a.duration, a.max_tokens)
        show("router", a.concurrency, routed)
        print(f"router/direct: TTFT p50 x{routed['ttft_p50'] / direct['ttft_p50']:.2f} "
              f"(+{(routed['ttft_p50'] - direct['ttft_p50']) * 1e3:.2f} ms), "
              f"ITL p50 x{routed['itl_p50'] / direct['itl_p50']:.2f} "
              f"(+{(routed['itl_p50'] - direct['itl_p50']) * 1e3:.2f} ms), "
              f"tokens/s x{routed['tok_s'] / direct['tok_s']:.2f}")
    finally:
        for p in procs:
            p.terminate()
            p.wait()


if __name__ == "__main__":
    asyncio.run(main())
