"""``run --notify URL``: a JSON POST per change of a deployment's Available condition, off the loop's thread.

Available is what an alert wants: whether the deployment serves. A planned change (an edit rolled
out, a scale, a hand-over) keeps it True while the old lives serve, so it notifies nobody; Ready
and Progressing, which every such change moves, are in events.jsonl and `reconciler events`.

The loop only enqueues (never blocks: a full queue drops its oldest entry); one
sender thread posts each event with bounded retries and gives up on it after them.
"""

from __future__ import annotations

import json
import queue
import threading
import time
import urllib.request

import structlog

log = structlog.get_logger("reconciler")
RETRIES = 3
TIMEOUT = 5.0
QUEUE_MAX = 1000
NOTIFIED = ("Available",)  # the condition types posted (an event's "condition" field)


class Notifier:
    def __init__(self, url: str, backoff: float = 0.5, conditions: tuple[str, ...] = NOTIFIED):
        self.url = url
        self.conditions = conditions
        self.backoff = backoff
        self.sent = 0
        self.dropped = 0
        self._q: queue.Queue[dict] = queue.Queue(QUEUE_MAX)
        threading.Thread(target=self._send_all, name="notify", daemon=True).start()

    def __call__(self, event: dict) -> None:
        """A state event: a change of one of ``conditions`` is sent, the rest is not."""
        if event.get("kind") != "Condition" or event.get("condition") not in self.conditions:
            return
        while True:
            try:
                self._q.put_nowait(event)
                return
            except queue.Full:
                try:
                    self._q.get_nowait()  # the oldest goes: the newest state matters more
                    self.dropped += 1
                except queue.Empty:
                    pass

    def _send_all(self) -> None:
        while True:
            event = self._q.get()
            body = json.dumps(event).encode()
            error = ""
            for attempt in range(RETRIES):
                try:
                    req = urllib.request.Request(self.url, data=body, method="POST",
                                                 headers={"Content-Type": "application/json"})
                    with urllib.request.urlopen(req, timeout=TIMEOUT) as r:  # noqa: S310 - the operator's URL
                        if r.status < 300:
                            self.sent += 1
                            break
                        error = f"HTTP {r.status}"
                except OSError as e:  # HTTPError (4xx/5xx) included
                    error = str(e)
                if attempt < RETRIES - 1:
                    time.sleep(self.backoff * 2 ** attempt)
            else:
                self.dropped += 1
                log.warning("notification not delivered", url=self.url, error=error, attempts=RETRIES)
