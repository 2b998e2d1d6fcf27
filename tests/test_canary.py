"""The frontend canary against a real OpenAI server (the project's mocker): what Ready means."""

from __future__ import annotations

import socket

from reconciler.shell.readiness.canary import canary
from tests.helpers import start_mocker


def test_canary_answers_only_when_the_model_is_listed_and_a_completion_returns(tmp_path):
    proc, url = start_mocker(tmp_path, "--speedup-ratio", "100")
    try:
        host, port = url.removeprefix("http://").split(":")
        assert canary(host, int(port), "m") is None
        why = canary(host, int(port), "other")
        assert why is not None and "'other' not listed by /v1/models (m)" in why
    finally:
        proc.stop()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))  # nobody listens here
        why = canary("127.0.0.1", s.getsockname()[1], "m")
    assert why is not None and why.startswith("canary failed: ConnectionRefusedError")


def _unit(port: int = 1, node: str = "a", slot: int = 0):
    from reconciler.world import Unit

    return Unit(recipe="r", role="frontend", index=0, ordinals=(0,), nodes=(node,), gpus=(), ports={"http": port},
                launches=(), container=None, health_port=port, canary="m", slot=slot)


def test_a_new_life_does_not_borrow_its_old_lifes_canary(monkeypatch):
    """A hand-over probes the old and the new frontend life in one pass: each is asked itself."""
    from reconciler.shell.readiness import canary as c

    asked: list[int] = []

    def fake(host, port, model, timeout=c.CANARY_TIMEOUT):
        asked.append(port)
        return None if port == 1 else "model 'm' not listed by /v1/models (none)"

    monkeypatch.setattr(c, "canary", fake)
    cs = c.Canaries()  # this test's own: its unit keys do not stay behind for other tests
    old, new = _unit(1, "a"), _unit(2, "b", slot=1)
    assert cs.passes(old) is True
    assert cs.passes(new) is False and asked == [1, 2]
    assert cs.why[new.key] == "model 'm' not listed by /v1/models (none)"


def test_a_canary_stuck_in_a_busy_queue_does_not_hold_the_probe(monkeypatch):
    """Under load the canary waits in the engines' queue like any request: the probe reads the last
    answer instead of waiting (a Ready frontend stays Ready), and a new life is not Ready until
    its first canary answers — then at once."""
    import threading
    import time

    from reconciler.shell.readiness import canary as c

    gate = threading.Event()
    fail = threading.Event()

    def slow(host, port, model, timeout=c.CANARY_TIMEOUT):
        assert gate.wait(10)
        return "canary completion answered 500: x" if fail.is_set() else None

    monkeypatch.setattr(c, "canary", slow)
    cs = c.Canaries()  # this test's own: its unit keys do not stay behind for other tests
    monkeypatch.setattr(c, "CANARY_INTERVAL", 0.0)  # every probe asks again
    u = _unit(7)
    t0 = time.monotonic()
    assert cs.passes(u) is False  # the first canary is in flight: not Ready, and why says so
    assert time.monotonic() - t0 < 2.0  # the probe waited CANARY_WAIT, not for the canary
    assert cs.why[u.key].startswith("its canary is in flight for")
    gate.set()
    cs.lives[(u.key, "a", 7, 0)].flight.result(5)
    assert cs.passes(u) is True and u.key not in cs.why
    gate.clear()
    assert cs.passes(u) is True  # a canary started and in flight: the last answer stands
    fail.set()
    gate.set()
    cs.lives[(u.key, "a", 7, 0)].flight.result(5)
    assert cs.passes(u) is False and cs.why[u.key] == "canary completion answered 500: x"


def test_a_relaunch_on_the_same_port_answers_its_own_canary(monkeypatch):
    """A relaunched frontend keeps its port: the last life's pass must not make the new one Ready."""
    import threading

    from reconciler.shell.readiness import canary as c

    gate = threading.Event()
    gate.set()

    def slow(host, port, model, timeout=c.CANARY_TIMEOUT):
        assert gate.wait(10)
        return None

    monkeypatch.setattr(c, "canary", slow)
    cs = c.Canaries()  # this test's own: its unit keys do not stay behind for other tests
    u = _unit(9)
    assert cs.passes(u) is True
    gate.clear()  # the new life's engines are slow to take its first request
    cs.new_life(u.key, u.slot)
    assert cs.passes(u) is False and cs.why[u.key].startswith("its canary is in flight")
    gate.set()


def test_a_canary_that_never_ends_is_a_failure_after_its_timeout(monkeypatch):
    """Each socket operation has the timeout, so a trickling frontend could hold a canary longer:
    past CANARY_TIMEOUT as a whole it fails, and no second canary of the life starts meanwhile."""
    import threading

    from reconciler.shell.readiness import canary as c

    gate = threading.Event()
    started: list[int] = []

    def stuck(host, port, model, timeout=c.CANARY_TIMEOUT):
        started.append(port)
        assert gate.wait(10)
        return None

    monkeypatch.setattr(c, "canary", stuck)
    cs = c.Canaries()  # this test's own: its unit keys do not stay behind for other tests
    monkeypatch.setattr(c, "CANARY_TIMEOUT", 0.5)
    u = _unit(11)
    try:
        assert cs.passes(u) is False  # in flight
        cs.lives[(u.key, "a", 11, 0)].started -= 1.0  # it has been in flight for longer than the timeout
        assert cs.passes(u) is False and cs.why[u.key] == "canary failed: no answer within 0.5s"
        assert started == [11]
    finally:
        gate.set()


def test_a_one_shot_pass_waits_for_the_whole_canary(monkeypatch, tmp_path):
    """get, plan and run --once have no later pass to read a canary's answer: they wait for it (a
    slow engine's one-token completion takes longer than the 0.3 s a pass of `run` waits)."""
    import time

    from reconciler.drivers.memory import MemoryDriver
    from reconciler.shell.readiness import canary as c
    from reconciler.shell.loop import ONE_SHOT_CANARY_WAIT, Controller

    def slow(host, port, model, timeout=c.CANARY_TIMEOUT):
        time.sleep(0.8)
        return None

    monkeypatch.setattr(c, "canary", slow)
    cs = c.Canaries()  # this test's own: its unit keys do not stay behind for other tests
    assert cs.passes(_unit(13), ONE_SHOT_CANARY_WAIT) is True
    assert cs.passes(_unit(14)) is False  # a pass of `run`: the next one reads it
    (tmp_path / "m").mkdir()
    ctl = Controller(tmp_path / "m", tmp_path / "s", MemoryDriver(), read_only=True)
    assert ctl.observer.canary_wait == ONE_SHOT_CANARY_WAIT
    assert Controller(tmp_path / "m", tmp_path / "s2", MemoryDriver()).observer.canary_wait == c.CANARY_WAIT
