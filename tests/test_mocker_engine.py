"""The mock engine's scheduler in-process: timing model, batching, KV, preemption, prefix cache."""

from __future__ import annotations

import asyncio

import pytest

from reconciler.mocker import timing
from reconciler.mocker.engine import Engine, EngineConfig, PromptTooLong, Request


def test_timing_formulas():
    assert timing.prefill_ms(0) == 0
    assert timing.prefill_ms(1000) == pytest.approx(4.209989e-07 * 1e6 + 1.518344e-02 * 1000 + 1.650142e01)
    assert timing.decode_ms(0.0) == pytest.approx(5.74)
    assert timing.decode_ms(0.5) == pytest.approx(-25.74 * 0.25 + 54.01 * 0.5 + 5.74)
    assert timing.decode_ms(5.0) == timing.decode_ms(1.0)  # clamped
    assert timing.step_seconds(100, True, 0.1, 0) == 0  # speedup 0 = no delay
    assert timing.step_seconds(0, True, 0.0, 2.0) == pytest.approx(5.74 / 2 / 1000)


async def _run(engine: Engine, reqs: list[Request], timeout: float = 30) -> None:
    task = asyncio.create_task(engine.run())
    try:
        for r in reqs:
            engine.submit(r)
        async def done():
            while not all(r.finished for r in reqs):
                await asyncio.sleep(0.001)
        await asyncio.wait_for(done(), timeout)
    finally:
        engine.stop()
        await asyncio.sleep(0)
        task.cancel()


def collect() -> tuple[list, callable]:
    items: list = []
    return items, items.append


def test_every_running_request_gets_one_token_per_step_and_max_tokens_is_honoured():
    eng = Engine(EngineConfig(speedup_ratio=0, max_num_seqs=8))
    outs = [collect() for _ in range(3)]
    reqs = [Request(f"r{i}", [1, 2, 3], max_tokens=5 + i, emit=outs[i][1]) for i in range(3)]
    asyncio.run(_run(eng, reqs))
    for i, (items, _) in enumerate(outs):
        tokens = [x for x in items if x[0] == "token"]
        assert len(tokens) == 5 + i
        assert items[-1] == ("done", "length")
    # all three decode together: the longest finishes after max_tokens steps (+1 for prefill)
    assert eng.steps <= 7 + 1


def test_max_num_seqs_bounds_the_batch():
    eng = Engine(EngineConfig(speedup_ratio=0, max_num_seqs=2))
    seen_running: list[int] = []
    reqs = [Request(f"r{i}", [1] * 4, 4, emit=lambda _x: seen_running.append(len(eng.running))) for i in range(5)]
    asyncio.run(_run(eng, reqs))
    assert max(seen_running) == 2


def test_kv_exhaustion_preempts_and_everything_still_finishes():
    # 6 blocks of 4 tokens; 3 requests that each grow to 12 tokens (3 blocks)
    eng = Engine(EngineConfig(speedup_ratio=0, num_gpu_blocks=6, block_size=4, enable_prefix_caching=False))
    outs = [collect() for _ in range(3)]
    reqs = [Request(f"r{i}", [i] * 4, 8, emit=outs[i][1]) for i in range(3)]
    asyncio.run(_run(eng, reqs))
    assert eng.preemptions > 0
    assert all(sum(1 for x in items if x[0] == "token") == 8 for items, _ in outs)
    assert eng.private_used == 0 and not eng.cache_refs  # everything released


def test_prefix_cache_hits_skip_prefill_compute():
    eng = Engine(EngineConfig(speedup_ratio=0, block_size=4))
    prompt = list(range(40))
    first, second = Request("a", prompt, 1), Request("b", prompt, 1)

    async def both():
        task = asyncio.create_task(eng.run())
        for r in (first, second):  # one after the other: the second finds the first's blocks cached
            eng.submit(r)
            while not r.finished:
                await asyncio.sleep(0.001)
        eng.stop()
        task.cancel()

    asyncio.run(asyncio.wait_for(both(), 30))
    assert first.cached_tokens == 0
    assert second.cached_tokens == 40


def test_prompt_larger_than_the_cache_is_rejected():
    eng = Engine(EngineConfig(num_gpu_blocks=2, block_size=4))
    with pytest.raises(PromptTooLong):
        eng.submit(Request("x", [1] * 20, 1))


def test_each_step_sleeps_the_time_the_model_gives_it():
    # each step sleeps what the timing model says for its batch and KV usage; how much longer a
    # loaded machine makes the sleep is a figure (printed), not a pass/fail
    speedup = 5.0
    eng = Engine(EngineConfig(speedup_ratio=speedup, num_gpu_blocks=1000, block_size=16))
    reqs = [Request("r", [1] * 16, 60)]
    asyncio.run(_run(eng, reqs))
    decode_steps = [(secs, plan, kv) for secs, plan, new, dec, kv in eng.step_log if dec and new == 0]
    assert len(decode_steps) >= 50
    for secs, plan, kv in decode_steps:
        assert plan == pytest.approx(timing.decode_ms(kv) / speedup / 1000)
        assert secs >= plan - 1e-3, "a step returned before its modelled time"
    measured = sum(s for s, _, _ in decode_steps)
    print(f"decode step time measured/model = {measured / sum(p for _, p, _ in decode_steps):.2f}")
    prefill = [(secs, new) for secs, _, new, dec, kv in eng.step_log if new > 0]
    assert prefill and prefill[0][1] == 16
