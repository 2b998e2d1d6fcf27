"""OpenAI-shaped errors and SSE framing, shared by the mocker and the router."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

ERROR_TYPES = {400: "invalid_request_error", 404: "not_found_error", 503: "service_unavailable", 502: "bad_gateway"}


def openai_app(*, health, metrics, models, chat, completions, on_startup, on_cleanup) -> web.Application:
    """The HTTP surface the engine and the router share, so clients cannot tell them apart."""
    app = web.Application(client_max_size=16 * 1024 * 1024)
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
    raw = await request.read()
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise ApiError(400, f"request body is not valid JSON: {e}") from None
    if not isinstance(body, dict):
        raise ApiError(400, "request body must be a JSON object")
    return body


def sse(obj: Any) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"
