"""The mock engine's scheduler: continuous batching over a simulated KV cache.

One asyncio task runs steps. Each step admits waiting requests (bounded by
``max_num_seqs``, the batched-token budget and free KV blocks; FCFS, no skipping),
computes prefill chunks and one decode token per running request, sleeps for the
timing model's step time, then emits tokens. When a decoding request needs a block
and none is free, the most recently admitted request is preempted (its blocks are
freed, it goes back to the head of the queue and is recomputed later).

Prefix caching: full prompt blocks are identified by a chained hash; blocks of
finished requests stay cached (LRU-evictable) until their space is needed.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any
from collections.abc import Callable

from reconciler.mocker import timing
from reconciler.mocker.tokenizer import Vocabulary


@dataclass(frozen=True)
class EngineConfig:
    mode: str = "agg"  # agg | prefill | decode
    speedup_ratio: float = 1.0
    decode_speedup_ratio: float = 1.0
    num_gpu_blocks: int = 16384
    block_size: int = 16
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    enable_prefix_caching: bool = True
    max_model_len: int | None = None  # prompt + max_tokens bound; None: what the KV cache holds

    @property
    def context_length(self) -> int:
        return self.max_model_len or self.num_gpu_blocks * self.block_size


class PromptTooLong(ValueError):
    pass


@dataclass(eq=False)
class Request:
    rid: str
    prompt: list[int]
    max_tokens: int
    seed: int = 0
    skip_prefill: bool = False  # decode worker with a prefill handle
    emit: Callable[[tuple], None] = lambda item: None
    arrival: float = field(default_factory=time.monotonic)
    # progress
    computed: int = 0  # tokens whose KV is in cache
    generated: int = 0
    first_token_at: float | None = None
    last_token_at: float | None = None
    cached_tokens: int = 0
    finished: bool = False
    # blocks
    prefix_hashes: list[str] = field(default_factory=list)  # cache blocks held (refcounted)
    private_blocks: int = 0
    admitted_seq: int = 0

    @property
    def total_tokens(self) -> int:
        return len(self.prompt) + self.generated

    @property
    def in_prefill(self) -> bool:
        return self.computed < self.total_tokens


class Engine:
    def __init__(self, cfg: EngineConfig, metrics: Any = None, vocab: Vocabulary | None = None):
        self.cfg = cfg
        self.metrics = metrics
        self.vocab = vocab or Vocabulary()
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.cache_refs: dict[str, int] = {}
        self.evictable: OrderedDict[str, None] = OrderedDict()
        self.private_used = 0
        self.preemptions = 0
        self.steps = 0
        # (secs slept, secs planned by the timing model, new_tokens, decoding, kv)
        self.step_log: deque[tuple[float, float, int, bool, float]] = deque(maxlen=4096)
        self._wake = asyncio.Event()
        self._admit_seq = 0
        self._stopped = False

    # ---------------------------------------------------------------- blocks
    @property
    def total_blocks(self) -> int:
        return self.cfg.num_gpu_blocks

    def free_blocks(self) -> int:
        return self.total_blocks - self.private_used - len(self.cache_refs) - len(self.evictable)

    def allocatable(self) -> int:
        return self.free_blocks() + len(self.evictable)

    def kv_usage(self) -> float:
        return (self.private_used + len(self.cache_refs)) / self.total_blocks

    def _take(self, n: int) -> None:
        """Reserve n blocks, evicting cached ones (LRU) when free ones run out."""
        short = n - self.free_blocks()
        for _ in range(max(0, short)):
            self.evictable.popitem(last=False)

    def _hashes(self, tokens: list[int]) -> list[str]:
        bs = self.cfg.block_size
        out, h = [], b""
        for i in range(len(tokens) // bs):
            h = hashlib.blake2b(h + repr(tokens[i * bs:(i + 1) * bs]).encode(), digest_size=8).digest()
            out.append(h.hex())
        return out

    def blocks_for(self, tokens: int) -> int:
        return math.ceil(tokens / self.cfg.block_size)

    # ---------------------------------------------------------------- API
    def submit(self, req: Request) -> None:
        limit = self.cfg.context_length
        if len(req.prompt) + req.max_tokens > limit:
            raise PromptTooLong(
                f"This model's maximum context length is {limit} tokens. However, you requested "
                f"{len(req.prompt) + req.max_tokens} tokens ({len(req.prompt)} in the prompt, {req.max_tokens} in the"
                " completion). Please reduce the prompt or max_tokens."
            )
        if self.blocks_for(len(req.prompt) + 1) > self.total_blocks:
            raise PromptTooLong(
                f"prompt of {len(req.prompt)} tokens needs more than the {self.total_blocks} KV blocks"
                f" of {self.cfg.block_size} tokens this engine has"
            )
        self.waiting.append(req)
        self._wake.set()

    def abort(self, req: Request) -> None:
        if req.finished:
            return
        req.finished = True
        if req in self.running:
            self.running.remove(req)
            self._release(req)
        else:
            try:
                self.waiting.remove(req)
            except ValueError:
                pass
        if self.metrics:
            self.metrics.step(len(self.running), len(self.waiting), self.kv_usage())

    def stop(self) -> None:
        self._stopped = True
        self._wake.set()

    # ---------------------------------------------------------------- admission
    def _try_admit(self, req: Request, budget: int) -> bool:
        if len(self.running) >= self.cfg.max_num_seqs or budget <= 0:
            return False
        tokens = req.prompt + [0] * req.generated  # recompute after preemption covers generated tokens too
        hashes = self._hashes(req.prompt) if self.cfg.enable_prefix_caching else []
        hits = 0
        for h in hashes:
            if h in self.cache_refs or h in self.evictable:
                hits += 1
            else:
                break
        hit_evictable = sum(1 for h in hashes[:hits] if h in self.evictable)
        need = self.blocks_for(len(tokens)) - hits
        if need > self.allocatable() - hit_evictable:
            return False
        for h in hashes[:hits]:
            self.evictable.pop(h, None)
            self.cache_refs[h] = self.cache_refs.get(h, 0) + 1
        self._take(need)
        full_new = hashes[hits:]
        for h in full_new:
            self.cache_refs[h] = self.cache_refs.get(h, 0) + 1
        req.prefix_hashes = list(hashes)
        req.private_blocks = need - len(full_new)
        self.private_used += req.private_blocks
        req.cached_tokens = hits * self.cfg.block_size
        req.computed = len(tokens) if req.skip_prefill else req.cached_tokens
        if self.metrics:
            self.metrics.prefix_queries(len(req.prompt), req.cached_tokens)
        self._admit_seq += 1
        req.admitted_seq = self._admit_seq
        self.running.append(req)
        return True

    def _release(self, req: Request) -> None:
        for h in req.prefix_hashes:
            n = self.cache_refs.get(h, 0) - 1
            if n <= 0:
                self.cache_refs.pop(h, None)
                if self.cfg.enable_prefix_caching:
                    self.evictable[h] = None
                    self.evictable.move_to_end(h)
            else:
                self.cache_refs[h] = n
        req.prefix_hashes = []
        self.private_used -= req.private_blocks
        req.private_blocks = 0

    def _preempt(self, victim: Request) -> None:
        self.running.remove(victim)
        self._release(victim)
        victim.computed = 0
        self.waiting.appendleft(victim)
        self.preemptions += 1
        if self.metrics:
            self.metrics.preempted()

    # ---------------------------------------------------------------- the loop
    async def run(self) -> None:
        while not self._stopped:
            if not self.running and not self.waiting:
                self._wake.clear()
                await self._wake.wait()
                continue
            await self.step()

    async def step(self) -> None:
        cfg = self.cfg
        budget = cfg.max_num_batched_tokens
        # decode tokens of running requests come first in the budget
        decoding = [r for r in self.running if not r.in_prefill]
        budget -= len(decoding)
        while self.waiting and self._try_admit(self.waiting[0], budget):
            self.waiting.popleft()
        # prefill chunks
        new_tokens = 0
        completing: list[Request] = []
        for r in self.running:
            if r.in_prefill and budget > 0:
                chunk = min(r.total_tokens - r.computed, budget)
                budget -= chunk
                new_tokens += chunk
                r.computed += chunk
                if not r.in_prefill:
                    completing.append(r)
        # decode needs room for one more token per request
        for r in sorted(decoding, key=lambda x: x.admitted_seq):
            if r not in self.running:
                continue
            while self._blocks_held(r) < self.blocks_for(r.total_tokens + 1):
                if self.allocatable() > 0:
                    self._take(1)
                    r.private_blocks += 1
                    self.private_used += 1
                    continue
                victim = max(self.running, key=lambda x: x.admitted_seq)
                self._preempt(victim)
                if victim is r:
                    break
        decoding = [r for r in decoding if r in self.running]
        kv = self.kv_usage()
        delay = timing.step_seconds(new_tokens, bool(decoding), kv, cfg.speedup_ratio, cfg.decode_speedup_ratio)
        t0 = time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        else:
            await asyncio.sleep(0)  # let handlers write what the last step produced
        self.steps += 1
        self.step_log.append((time.monotonic() - t0, delay, new_tokens, bool(decoding), kv))
        now = time.monotonic()
        for r in decoding + completing:
            if r.finished or r not in self.running:
                continue
            self._emit_token(r, now)
        if self.metrics:
            self.metrics.step(len(self.running), len(self.waiting), self.kv_usage())

    def _blocks_held(self, r: Request) -> int:
        return len(r.prefix_hashes) + r.private_blocks

    def _emit_token(self, r: Request, now: float) -> None:
        text = self.vocab.piece(r.seed, r.generated)
        r.generated += 1
        r.computed += 1
        if r.first_token_at is None:
            r.first_token_at = now
            if self.metrics:
                self.metrics.first_token(now - r.arrival)
        elif self.metrics and r.last_token_at is not None:
            self.metrics.inter_token(now - r.last_token_at)
        r.last_token_at = now
        if self.metrics:
            self.metrics.tokens(1)
        r.emit(("token", text, r.generated - 1))
        done = r.generated >= r.max_tokens or (self.cfg.mode == "prefill")
        if not done and self.blocks_for(r.total_tokens + 1) > self.total_blocks:
            done = True  # the cache cannot hold one more token: stop like a length limit
        if done:
            r.finished = True
            self.running.remove(r)
            self._release(r)
            if self.metrics:
                self.metrics.finished(now - r.arrival, len(r.prompt), "length")
            r.emit(("done", "length"))
