"""OpenAI-shaped errors and SSE framing, shared by the mocker and the router."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from aiohttp import web

ERROR_TYPES = {400: "invalid_request_error", 404: "not_found_error", 408: "timeout", 413: "invalid_request_error",
               503: "service_unavailable", 502: "bad_gateway"}
MAX_BODY = 16 * 1024 * 1024  # bytes a request body may have
MAX_DEPTH = 64  # JSON nesting a request may have; real ones use 4 or 5
REQUEST_TIMEOUT = 30.0  # seconds a client may take to send its body


def openai_app(*, health, metrics, models, chat, completions, on_startup, on_cleanup,
               request_timeout: float = REQUEST_TIMEOUT) -> web.Application:
    """The HTTP surface the engine and the router share, so clients cannot tell them apart.

    Serve it with ``handler_cancellation=True`` (``run_app``): a client that goes
    away cancels its handler, which is how abandoned requests free their slot.
    """
    app = web.Application(client_max_size=MAX_BODY)
    app["request_timeout"] = request_timeout
    app.router.add_get("/health", health)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_post("/v1/completions", completions)
    app.on_startup.append(on_startup)
    app.on_cleanup.append(on_cleanup)
    return app


class ApiError(Exception):
    def __init__(self, status: int, message: str, etype: str | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.etype = etype or ERROR_TYPES.get(status, "server_error")


def error_response(e: ApiError) -> web.Response:
    return web.json_response(
        {"error": {"message": e.message, "type": e.etype, "param": None, "code": e.status}}, status=e.status
    )


async def parse_json_body(request: web.Request) -> dict[str, Any]:
    timeout = request.app.get("request_timeout", REQUEST_TIMEOUT)
    try:
        raw = await asyncio.wait_for(request.read(), timeout)
    except TimeoutError:
        raise ApiError(408, f"request body not received within {timeout:g}s") from None
    except web.HTTPRequestEntityTooLarge:
        # aiohttp's own exception would be a plain-text 413 here and a 500 through a catch-all
        raise ApiError(413, f"request body is larger than {MAX_BODY} bytes") from None
    try:
        body = json.loads(raw)
    except RecursionError:
        raise ApiError(400, f"request body is nested deeper than {MAX_DEPTH} levels") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise ApiError(400, f"request body is not valid JSON: {e}") from None
    if not isinstance(body, dict):
        raise ApiError(400, "request body must be a JSON object")
    if _depth(body) > MAX_DEPTH:
        raise ApiError(400, f"request body is nested deeper than {MAX_DEPTH} levels")
    return body


def _depth(obj: Any) -> int:
    """Nesting depth, iteratively (the body is untrusted; no recursion)."""
    deepest, stack = 0, [(obj, 1)]
    while stack:
        o, d = stack.pop()
        deepest = max(deepest, d)
        if deepest > MAX_DEPTH:
            return deepest
        if isinstance(o, dict):
            stack.extend((v, d + 1) for v in o.values())
        elif isinstance(o, list):
            stack.extend((v, d + 1) for v in o)
    return deepest


def sse(obj: Any) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"
