"""python -m reconciler.router --port P --endpoints-file F"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from aiohttp import web

from reconciler.router.listen import shared_listener
from reconciler.router.server import Router, log


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m reconciler.router", description="OpenAI router in front of a recipe's workers")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--host", default="0.0.0.0")
    p.add_argument("--endpoints-file", type=Path, required=True, help='JSON: {"workers": [{"url": ..., "role": ...}]}')
    p.add_argument("--model-name", default=None, help="served name for /v1/models when no worker answers")
    p.add_argument("--request-timeout", type=float, default=30.0, help="seconds a client may take to send its body")
    p.add_argument("--poll-interval", type=float, default=0.25, help="seconds between endpoints-file checks")
    p.add_argument("--life", choices=("a", "b"), default="a",
                   help="which life of the router this is: /health?life=X answers 404 for the other one, which "
                        "may share the port during a replacement")
    a = p.parse_args(argv)
    router = Router(a.endpoints_file, a.model_name, a.poll_interval, request_timeout=a.request_timeout, life=a.life)
    log("INFO", f"starting port={a.port} endpoints={a.endpoints_file} life={a.life}")
    try:
        router.load_endpoints()  # before the first connection can arrive: a successor serves at once
        sock = shared_listener(a.host, a.port)
        # handler_cancellation: a client that leaves cancels the upstream request too
        web.run_app(router.app(), sock=sock, print=None, access_log=None, shutdown_timeout=2.0,
                    handler_cancellation=True,
                    keepalive_timeout=a.request_timeout)  # also closes a connection whose headers never end
    except OSError as e:
        log("FATAL", f"cannot listen on {a.host}:{a.port}: {e.strerror or e}")
        sys.exit(2)


if __name__ == "__main__":
    main()
