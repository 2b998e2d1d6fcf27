"""`run --ui-addr HOST:PORT`: the status page and its JSON API, read-only, on a thread of its own.

The loop hands over a finished document after each tick (``StatusUI.on_tick``); a scraper
thread reads the engines' /metrics into the bounded history; the HTTP thread only serves
what is ready. Nothing here can write state/ or act on the cluster: GET only.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import structlog

from reconciler import hostguard
from reconciler.ui import history, model, svg
from reconciler.ui.page import PAGE

log = structlog.get_logger("reconciler")
SCRAPE_EVERY = 10.0  # seconds between reads of the engines' /metrics
ROLES = ("prefill", "decode", "agg")


def metric_urls(d) -> list[str]:
    """The engines whose counters describe the deployment's traffic: decode and agg workers
    (a prefill worker sees each request too: counting it would count a request twice)."""
    units = [u for u in d.units if u.role in ROLES and u.metrics_path and u.health_port]
    served = [u for u in units if u.role != "prefill"] or units
    return [f"http://{u.nodes[0]}:{u.health_port}{u.metrics_path}" for u in served]


class StatusUI:
    def __init__(self, settings: dict) -> None:
        self.settings = settings
        self.history = history.History()
        self._doc: dict = {"deployments": [], "events": [], "settings": settings, "controller": {},
                           "autoscaler": {"available": False, "deployments": {}, "decisions": []}, "generatedAt": None}
        self._targets: dict[str, tuple[list[str], dict[str, int]]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()

    # ---------------------------------------------------------------- from the loop
    def on_tick(self, ctl, snap) -> None:
        """After a tick: the document (cheap: state/ files already written) and what to scrape."""
        names = list(snap.plan.recipes)
        doc = model.build(ctl, names, self.settings)
        targets = {}
        for name, d in snap.desired.recipes.items():
            ready = {r: 0 for r in sorted({u.role for u in d.units if u.role in ROLES})}
            for u in d.units:
                if u.role in ROLES and snap.observed.ready.get(u.key):
                    ready[u.role] += 1
            targets[name] = (metric_urls(d), ready)
        with self._lock:
            self._doc = doc
            self._targets = targets
        self.history.forget(set(targets))

    # ---------------------------------------------------------------- threads
    def _scrape_loop(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                targets = dict(self._targets)
            for name, (urls, ready) in targets.items():
                try:
                    self.history.add(name, history.scrape(urls) if urls else None, ready)
                except Exception as e:  # noqa: BLE001 - the page's plots must never take the loop down
                    log.warning("status page: cannot read metrics", recipe=name, error=str(e))
            self._stop.wait(SCRAPE_EVERY)

    def document(self) -> dict:
        with self._lock:
            doc = dict(self._doc)
        now = time.time()
        doc["deployments"] = [{**d, "plots": svg.plots(self.history.series(d["name"]), now)}
                              for d in doc["deployments"]]
        doc["history"] = {d["name"]: self.history.series(d["name"])[-1:] for d in doc["deployments"]}
        return doc

    def serve(self, addr: str, token: str | None = None) -> ThreadingHTTPServer:
        """``token``: every request must carry it (``run --http-token-file``; hostguard.presented)."""
        host, _, port = addr.rpartition(":")
        ui = self
        names = hostguard.own_names(host or "127.0.0.1")

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                path, _, query = self.path.partition("?")
                if not hostguard.host_allowed(self.headers.get("Host"), names):  # DNS rebinding
                    return self._send(421, "text/plain", b"this page answers only to its own host name\n")
                given, in_query = hostguard.presented(self.headers, query)
                if not hostguard.token_ok(given, token):
                    return self._send(401, "text/plain", b"a token is required (run --http-token-file): "
                                      b"Authorization: Bearer <token>, or ?token=<token> once\n")
                self._cookie = hostguard.set_cookie(given) if in_query and token else None
                if path in ("/", "/index.html"):
                    self._send(200, "text/html; charset=utf-8", PAGE.encode())
                elif path == "/api/status":
                    self._send(200, "application/json", json.dumps(ui.document()).encode())
                elif path == "/healthz":
                    self._send(200, "text/plain", b"ok\n")
                else:
                    self._send(404, "text/plain", b"not found\n")

            def _refuse(self) -> None:
                self._send(405, "text/plain", b"read-only\n")

            do_POST = do_PUT = do_DELETE = do_PATCH = _refuse  # noqa: N815

            def _send(self, code: int, ctype: str, body: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", "no-store")
                if getattr(self, "_cookie", None):  # the page's own fetches then carry the token
                    self.send_header("Set-Cookie", self._cookie)
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:  # the reconciler's log is for the reconciler
                pass

        server = ThreadingHTTPServer((host or "127.0.0.1", int(port)), Handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, name="status-page", daemon=True).start()
        threading.Thread(target=self._scrape_loop, name="status-page-metrics", daemon=True).start()
        return server
