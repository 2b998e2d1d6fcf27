"""The mock engine's OpenAI-compatible HTTP server."""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import os
import sys
import time
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from reconciler.mocker.engine import Engine, EngineConfig, PromptTooLong, Request
from reconciler.mocker.metrics import EngineMetrics
from reconciler.mocker.tokenizer import Vocabulary
from reconciler.serving.openai import ApiError, error_response, openai_app, parse_json_body, sse

DEFAULT_MAX_TOKENS = {"chat": 64, "completion": 16}


def log(level: str, msg: str) -> None:
    # one line per event on stdout: what a backend's fatal_log_patterns match against
    print(f"{level} mocker: {msg}", flush=True)


@dataclass(frozen=True)
class ServerConfig:
    host: str = "0.0.0.0"
    port: int = 8000
    model_name: str = "mock-model"
    startup_time: float = 0.0
    crash_after: float | None = None
    hang_after: float | None = None
    request_timeout: float = 30.0
    model_path: str | None = None
    # fault: answers carry at most this many tokens (0: empty answers that still succeed, the way an
    # engine whose KV transfer broke answers); the engine still decodes max_tokens, so timing stays
    emit_tokens: int | None = None


class MockerServer:
    def __init__(self, scfg: ServerConfig, ecfg: EngineConfig, vocab: Vocabulary | None = None):
        self.scfg = scfg
        self.ecfg = ecfg
        self.metrics = EngineMetrics(scfg.model_name)
        self.vocab = vocab or Vocabulary()
        self.engine = Engine(ecfg, self.metrics, self.vocab)
        self.started = time.monotonic()
        self.hung = asyncio.Event()  # set = stop answering
        self._ids = itertools.count(1)
        self._tasks: list[asyncio.Task] = []
        self._ready = False

    # ---------------------------------------------------------------- app
    def app(self) -> web.Application:
        app = openai_app(health=self.health, metrics=self.metrics_handler, models=self.models, chat=self.chat,
                         completions=self.completions, on_startup=self._on_startup, on_cleanup=self._on_cleanup,
                         request_timeout=self.scfg.request_timeout)
        # what the SGLang router asks a worker for (an SGLang server's own routes)
        for path in ("/get_model_info", "/model_info"):
            app.router.add_get(path, self.model_info)
        for path in ("/get_server_info", "/server_info"):
            app.router.add_get(path, self.server_info)
        return app

    async def model_info(self, request: web.Request) -> web.Response:
        await self._gate()
        return web.json_response({"model_path": self.scfg.model_path or self.scfg.model_name,
                                  "tokenizer_path": self.scfg.model_path or self.scfg.model_name,
                                  "served_model_name": self.scfg.model_name, "is_generation": True})

    async def server_info(self, request: web.Request) -> web.Response:
        await self._gate()
        mode = self.ecfg.mode
        return web.json_response({
            "model_path": self.scfg.model_path or self.scfg.model_name, "served_model_name": self.scfg.model_name,
            "disaggregation_mode": "null" if mode == "agg" else mode, "tp_size": 1, "dp_size": 1,
            "max_running_requests": self.ecfg.max_num_seqs, "page_size": self.ecfg.block_size,
            "version": "reconciler-mocker"})

    async def _on_startup(self, app: web.Application) -> None:
        self.started = time.monotonic()  # startup time counts from serving, not from loading the tokenizer
        self._tasks.append(asyncio.create_task(self.engine.run()))
        if self.scfg.startup_time > 0:
            self._tasks.append(asyncio.create_task(self._announce_ready()))
        else:
            log("INFO", "ready")
            self._ready = True
        if self.scfg.crash_after is not None:
            self._tasks.append(asyncio.create_task(self._crash(self.scfg.crash_after)))
        if self.scfg.hang_after is not None:
            self._tasks.append(asyncio.create_task(self._hang(self.scfg.hang_after)))

    async def _on_cleanup(self, app: web.Application) -> None:
        self.engine.stop()
        for t in self._tasks:
            t.cancel()
        log("INFO", "stopped")

    async def _announce_ready(self) -> None:
        await asyncio.sleep(self.scfg.startup_time)
        # the line first, then the flag: whoever sees 200 can also find the line in the log
        log("INFO", f"ready after {self.scfg.startup_time:g}s startup")
        self._ready = True

    async def _crash(self, after: float) -> None:
        await asyncio.sleep(after)
        log("FATAL", f"simulated engine crash after {after:g}s (--crash-after)")
        sys.stdout.flush()
        os._exit(3)

    async def _hang(self, after: float) -> None:
        await asyncio.sleep(after)
        log("FATAL", f"simulated engine hang after {after:g}s (--hang-after): no more responses")
        self.engine.stop()
        self.hung.set()

    @property
    def ready(self) -> bool:
        return self._ready

    async def _gate(self) -> None:
        if self.hung.is_set():
            await asyncio.Event().wait()  # alive but silent, like a wedged engine

    # ---------------------------------------------------------------- handlers
    async def health(self, request: web.Request) -> web.Response:
        await self._gate()
        if not self.ready:
            return web.json_response({"status": "starting"}, status=503)
        return web.json_response({"status": "ok", "mode": self.ecfg.mode})

    async def metrics_handler(self, request: web.Request) -> web.Response:
        await self._gate()
        return web.Response(body=self.metrics.render(), content_type="text/plain", charset="utf-8")

    async def models(self, request: web.Request) -> web.Response:
        await self._gate()
        return web.json_response({"object": "list", "data": [
            {"id": self.scfg.model_name, "object": "model", "created": int(self.started), "owned_by": "reconciler-mocker"}
        ]})

    async def chat(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, "chat")

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, "completion")

    # ---------------------------------------------------------------- generation
    async def _generate(self, request: web.Request, kind: str) -> web.StreamResponse:
        await self._gate()
        try:
            if not self.ready:
                raise ApiError(503, "engine is starting up", "service_unavailable")
            body = await parse_json_body(request)
            prompt_text, max_tokens, stream, include_usage = self._parse(body, kind)
            handle = self._handle(body)
        except ApiError as e:
            return error_response(e)
        rid = f"{'chatcmpl' if kind == 'chat' else 'cmpl'}-{os.getpid()}-{next(self._ids)}"
        queue: asyncio.Queue = asyncio.Queue()
        prompt = self.vocab.encode(prompt_text)
        if handle is not None:
            prompt = prompt or [0] * int(handle.get("prompt_tokens", 1))
        req = Request(rid, prompt, max_tokens, seed=len(prompt), skip_prefill=handle is not None, emit=queue.put_nowait)
        try:
            self.engine.submit(req)
        except PromptTooLong as e:
            return error_response(ApiError(400, str(e)))
        created = int(time.time())
        try:
            if self.ecfg.mode == "prefill":
                return await self._prefill_reply(req, queue, kind, created)
            if stream:
                return await self._stream(request, req, queue, kind, created, include_usage)
            return await self._whole(req, queue, kind, created)
        finally:
            self.engine.abort(req)  # no-op when finished; frees the slot when the client went away

    def _parse(self, body: dict[str, Any], kind: str) -> tuple[str, int, bool, bool]:
        model = body.get("model")
        if model is not None and model != self.scfg.model_name:
            raise ApiError(404, f"The model `{model}` does not exist.", "not_found_error")
        if kind == "chat":
            msgs = body.get("messages")
            if not isinstance(msgs, list) or not msgs:
                raise ApiError(400, "'messages' is required and must be a non-empty list")
            parts = []
            for i, m in enumerate(msgs):
                if not isinstance(m, dict) or not isinstance(m.get("role"), str):
                    raise ApiError(400, f"messages[{i}] must be an object with a string 'role'")
                content = m.get("content")
                if isinstance(content, list):
                    texts = [p.get("text", "") if isinstance(p, dict) else p for p in content]
                    if not all(isinstance(t, str) for t in texts):
                        raise ApiError(400, f"messages[{i}].content: content parts must be objects with a string 'text'")
                    content = " ".join(texts)
                elif content is not None and not isinstance(content, str):
                    raise ApiError(400, f"messages[{i}].content must be a string or a list of content parts")
                parts.append(f"{m['role']}: {content or ''}")
            text = "\n".join(parts)
            mt = body.get("max_completion_tokens", body.get("max_tokens"))
        else:
            p = body.get("prompt")
            if isinstance(p, list) and len(p) == 1 and isinstance(p[0], str):
                p = p[0]
            if isinstance(p, list) and p and all(isinstance(x, int) and not isinstance(x, bool) for x in p):
                p = " ".join(map(str, p))
            if not isinstance(p, str):
                raise ApiError(400, "'prompt' is required: a string, a one-element list of strings, or a list of token ids")
            text = p
            mt = body.get("max_tokens")
        if mt is None:
            mt = DEFAULT_MAX_TOKENS[kind]
        if isinstance(mt, bool) or not isinstance(mt, int) or mt < 1:
            raise ApiError(400, f"'max_tokens' must be a positive integer, got {mt!r}")
        n = body.get("n", 1)
        if n != 1:
            raise ApiError(400, "only n=1 is supported")
        stream = body.get("stream", False)
        if not isinstance(stream, bool):
            raise ApiError(400, "'stream' must be a boolean")
        opts = body.get("stream_options") or {}
        if not isinstance(opts, dict):
            raise ApiError(400, "'stream_options' must be an object")
        return text, mt, stream, bool(opts.get("include_usage"))

    def _handle(self, body: dict[str, Any]) -> dict | None:
        params = body.get("disaggregated_params")
        if params is None:
            return None
        if self.ecfg.mode != "decode":
            raise ApiError(400, "disaggregated_params are only accepted by a decode worker")
        try:
            data = json.loads(base64.urlsafe_b64decode(str(params.get("handle", "")).encode()))
            assert isinstance(data, dict)
        except Exception:
            raise ApiError(400, "disaggregated_params.handle is not a handle issued by a prefill worker") from None
        return data

    def _usage(self, req: Request) -> dict[str, int]:
        n = req.generated if self.scfg.emit_tokens is None else min(req.generated, self.scfg.emit_tokens)
        return {"prompt_tokens": len(req.prompt), "completion_tokens": n, "total_tokens": len(req.prompt) + n}

    def _shown(self, item: tuple) -> bool:
        """Whether a token the engine made reaches the client (the emit_tokens fault drops the rest)."""
        return self.scfg.emit_tokens is None or item[2] < self.scfg.emit_tokens

    async def _collect(self, req: Request, queue: asyncio.Queue) -> tuple[str, str]:
        pieces = []
        while True:
            item = await queue.get()
            if item[0] == "token":
                if self._shown(item):
                    pieces.append(item[1])
            else:
                return "".join(pieces), item[1]

    async def _prefill_reply(self, req: Request, queue: asyncio.Queue, kind: str, created: int) -> web.Response:
        text, reason = await self._collect(req, queue)
        handle = base64.urlsafe_b64encode(json.dumps({"rid": req.rid, "prompt_tokens": len(req.prompt)}).encode()).decode()
        body = self._whole_body(req, kind, created, text, reason)
        body["disaggregated_params"] = {"handle": handle, "prompt_tokens": len(req.prompt)}
        return web.json_response(body)

    async def _whole(self, req: Request, queue: asyncio.Queue, kind: str, created: int) -> web.Response:
        text, reason = await self._collect(req, queue)
        return web.json_response(self._whole_body(req, kind, created, text, reason))

    def _whole_body(self, req: Request, kind: str, created: int, text: str, reason: str) -> dict:
        if kind == "chat":
            choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": reason}
            obj = "chat.completion"
        else:
            choice = {"index": 0, "text": text, "finish_reason": reason, "logprobs": None}
            obj = "text_completion"
        return {"id": req.rid, "object": obj, "created": created, "model": self.scfg.model_name,
                "choices": [choice], "usage": self._usage(req)}

    async def _stream(self, request: web.Request, req: Request, queue: asyncio.Queue, kind: str,
                      created: int, include_usage: bool) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        chat = kind == "chat"
        obj = "chat.completion.chunk" if chat else "text_completion"
        model = self.scfg.model_name

        def chunk(piece: str | None, reason: str | None, first: bool = False) -> dict:
            if chat:
                delta: dict[str, Any] = {"role": "assistant", "content": piece or ""} if first else (
                    {"content": piece} if piece is not None else {})
                choice = {"index": 0, "delta": delta, "finish_reason": reason}
            else:
                choice = {"index": 0, "text": piece or "", "finish_reason": reason, "logprobs": None}
            return {"id": req.rid, "object": obj, "created": created, "model": model, "choices": [choice]}

        first = True
        while True:
            item = await queue.get()
            if item[0] == "token":
                if self._shown(item):
                    await resp.write(sse(chunk(item[1], None, first)))
                    first = False
                continue
            await resp.write(sse(chunk(None, item[1])))
            if include_usage:
                await resp.write(sse({"id": req.rid, "object": obj, "created": created, "model": model,
                                      "choices": [], "usage": self._usage(req)}))
            await resp.write(b"data: [DONE]\n\n")
            break
        await resp.write_eof()
        return resp
