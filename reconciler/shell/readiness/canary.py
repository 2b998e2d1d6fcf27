"""A frontend's canary: a one-token completion through it, which its readiness probe needs.

The canary goes through the frontend's router to an engine, so it waits in the engines' queue like
any request: under load it takes as long as a queued request (seconds). The tick must not wait for
that — a tick held by a busy deployment's canary delays the very scale-up that would relieve it (a
1.8 s tick per pass, measured with 16 clients on one worker) — so a canary runs on threads of its
own, and a probe reads the last answer of the frontend's life:

- the first canary of a life, or one due again (``CANARY_INTERVAL`` after the last start, or at once
  after a failure), is started and waited for up to ``CANARY_WAIT``: a quick frontend is Ready in
  the pass that asked;
- one still in flight leaves the last answer standing (Ready stays Ready until a canary fails); a
  life never answered is not Ready, and ``why`` says its canary is in flight and for how long;
- a canary is bounded by ``CANARY_TIMEOUT``: one that gets no answer within it is a failure.
"""

from __future__ import annotations

import http.client
import json
import time
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass

from reconciler.world import Unit

CANARY_TIMEOUT = 5.0  # a one-token completion through a frontend (its engines may be busy)
CANARY_INTERVAL = 1.0  # seconds between two canaries of one frontend: Ready goes within this + a tick
CANARY_WAIT = 0.3  # how long a probe waits for the canary it started before it reads the last answer
BODY_LIMIT = 65536
# the canaries' threads: a pool shared by every controller of the process (threads, not memory:
# what a controller remembers of its canaries is its own Canaries)
_pool = ThreadPoolExecutor(max_workers=16, thread_name_prefix="canary")
FORGET_SECONDS = 60.0  # a life not asked for this long is no longer probed (it ended)


@dataclass
class _Life:
    started: float  # the last canary's start
    answered: bool = False  # a canary of this life has answered
    answer: str | None = None  # the last answer: None passes, else why it failed
    flight: Future | None = None
    asked: float = 0.0  # the last probe that read it


class Canaries:
    """What one controller knows of its frontends' canaries (see the module's doc)."""

    def __init__(self) -> None:
        # unit key -> why its health probe passes but it is not Ready (its canary failed): the tick reads it
        self.why: dict[tuple[str, str, int], str] = {}
        # (unit key, host, port, slot) -> its canaries: per life, not per unit, so that a hand-over's new
        # frontend life (another address) or a surge's (another slot) never borrows the old one's passing answer
        self.lives: dict[tuple[tuple[str, str, int], str, int, int], _Life] = {}

    def new_life(self, key: tuple[str, str, int], slot: int) -> None:
        """A unit launched again (a relaunch keeps its port): its new life starts with no answer."""
        for at in [at for at in self.lives if at[0] == key and at[3] == slot]:
            self.lives.pop(at, None)

    def passes(self, u: Unit, wait: float = CANARY_WAIT) -> bool:
        """The frontend's canary as last answered (see the module's doc); ``why`` is kept for the tick.
        ``wait``: how long a canary is waited for while there is no passing answer (a one-shot process,
        with no later pass to read it, waits for the whole canary)."""
        now = time.monotonic()
        at = (u.key, u.nodes[0], u.health_port or 0, u.slot)
        lives, life = self.lives, self.lives.get(at)
        if life is None or (life.flight is None and (life.answer is not None or now - life.started >= CANARY_INTERVAL)):
            if len(lives) > 4096:  # lives come and go: the ones no longer asked about are forgotten
                for old, v in list(lives.items()):  # a copy: other probe threads add lives meanwhile
                    if now - v.asked > FORGET_SECONDS:
                        lives.pop(old, None)
            life = lives[at] = _Life(now, *((life.answered, life.answer) if life else (False, None)))
            life.flight = _pool.submit(_run, life, u.nodes[0], u.health_port or 0, u.canary)
        # a canary is waited for a moment while there is no passing answer (a quick frontend is Ready in
        # this pass); never while one passes: it stands meanwhile
        _settle(life, wait if not life.answered or life.answer is not None else 0)
        life.asked = now
        if not life.answered:
            self.why[u.key] = f"its canary is in flight for {now - life.started:.1f}s (no answer yet)"
            return False
        if life.answer is None:
            self.why.pop(u.key, None)
            return True
        self.why[u.key] = life.answer
        return False


def canary(host: str, port: int, model: str, timeout: float = CANARY_TIMEOUT) -> str | None:
    """None when the frontend answers: ``model`` is listed by GET /v1/models and a one-token
    completion through it returns 200 (for a disaggregated recipe, that request crosses prefill
    and decode). Otherwise the reason, as the operator should read it."""
    try:
        conn = http.client.HTTPConnection(host, port, timeout=timeout)
        conn.request("GET", "/v1/models")
        r = conn.getresponse()
        body = r.read(BODY_LIMIT)
        if r.status != 200:
            return f"GET /v1/models answered {r.status}"
        listed = [str(m.get("id")) for m in json.loads(body).get("data", []) if isinstance(m, dict)]
        # an engine started with a model path and no served name lists the path (dynamo.mocker does)
        name = model if model in listed else next((m for m in listed if m.rstrip("/").rsplit("/", 1)[-1] == model), None)
        if name is None:
            return f"model {model!r} not listed by /v1/models ({', '.join(listed[:3]) or 'none'})"
        conn.request("POST", "/v1/completions", body=json.dumps({"model": name, "prompt": "ping", "max_tokens": 1}),
                     headers={"Content-Type": "application/json", "User-Agent": "reconciler-canary"})
        r = conn.getresponse()
        body = r.read(BODY_LIMIT)
        conn.close()
        if r.status != 200:
            return f"canary completion answered {r.status}: {body[:120].decode(errors='replace')}"
        return None
    except (OSError, ValueError, AttributeError, http.client.HTTPException) as e:
        return f"canary failed: {type(e).__name__}: {e}"


def _run(life: _Life, host: str, port: int, model: str) -> str | None:
    life.started = time.monotonic()  # its time counts from here: not the time it queued for a thread
    return canary(host, port, model)


def _settle(life: _Life, wait: float) -> None:
    """The flight's answer, if it came within ``wait`` seconds. One that took longer than
    CANARY_TIMEOUT as a whole (each socket operation has that timeout: a frontend that trickles
    its answer could take several) is a failure now; its thread ends on its own, and no other
    canary of the life starts before it has."""
    flight = life.flight
    if flight is None:
        return
    try:
        answer = flight.result(timeout=wait)
    except FutureTimeout:
        if time.monotonic() - life.started > CANARY_TIMEOUT:
            life.answer, life.answered = f"canary failed: no answer within {CANARY_TIMEOUT:g}s", True
        return
    except Exception as e:  # noqa: BLE001 - canary() answers every failure; anything else is one too
        answer = f"canary failed: {type(e).__name__}: {e}"
    life.answer, life.answered, life.flight = answer, True, None
