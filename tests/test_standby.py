"""The standby controller (issue 32): a second ``run --standby`` on the same state directory waits
for the active one's lock and takes over when it dies (kill -9), adopting everything: no request
through the router fails, no step is launched twice. Real Slurm, real processes."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from harness import Harness
from helpers import wait_until
from support.recipes import ROUTED
from support.clients import Client

pytestmark = pytest.mark.slurm


def _controller(h: Harness) -> dict:
    try:
        return json.loads((h.state / "controller.json").read_text())
    except (FileNotFoundError, ValueError):
        return {}


def test_a_standby_takes_over_from_a_killed_controller_with_no_failed_request(tmp_path, summary):
    h = Harness(tmp_path, "slurm")
    standby = client = None
    try:
        name = h.name("standby")
        (h.manifests / f"{name}.yaml").write_text(ROUTED.format(name=name).replace("workers: 1", "workers: 2"))
        h.start("--standby")  # the first takes the lock at once
        endpoint = h.wait_ready(name, timeout=90)["endpoint"]
        routed = h.state / name / "endpoints.json"
        wait_until(lambda: len(json.loads(routed.read_text())["workers"]) == 2, what="both workers routed")
        log = open(tmp_path / "standby.log", "ab")
        standby = subprocess.Popen(
            [sys.executable, "-m", "reconciler.cli", "run", "--manifests", str(h.manifests), "--state", str(h.state),
             "--driver", "slurm", "--resync", "1", "--standby"],
            stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path, env=h.env)
        wait_until(lambda: (h.state / "standby.json").exists()
                   and json.loads((h.state / "standby.json").read_text())["pid"] == standby.pid,
                   timeout=30, what="the standby waiting")
        shown = h.cli("get").stdout
        assert f"active pid {h.proc.pid}" in shown and f"standby pid {standby.pid}" in shown, shown
        steps = h.steps(name)
        actions = len(h.actions(name))
        client = Client(endpoint, limit=5000)
        client.start()
        wait_until(lambda: client.ok >= 20, what="requests before the kill")
        t0 = time.monotonic()
        h.kill9()
        wait_until(lambda: _controller(h).get("pid") == standby.pid, timeout=10, interval=0.1,
                   what="the standby's first pass within 10 s")
        took = time.monotonic() - t0
        first = _controller(h)["ticks"]
        wait_until(lambda: _controller(h).get("ticks", 0) >= first + 3, timeout=30, what="3 passes of the standby")
        n = client.ok
        wait_until(lambda: client.ok >= n + 50, timeout=60, what="requests after the takeover")
        client.halt.set()
        client.join(15)
        assert client.failed == [], (client.ok, client.failed[:5])
        assert h.steps(name) == steps  # adopted: the same steps, none launched twice
        assert h.actions(name)[actions:] == []
        assert f"active pid {standby.pid}" in h.cli("get").stdout
        assert not (h.state / "standby.json").exists()
        summary(f"standby takeover: first pass {took:.1f}s after kill -9 of the active controller; "
                f"requests ok {client.ok}, failed 0")
    finally:
        if client is not None:
            client.halt.set()
            client.join(15)
        if standby is not None and standby.poll() is None:
            standby.send_signal(signal.SIGTERM)
            standby.wait(20)
        h.cleanup()


def test_a_standby_takes_over_from_a_stopped_controller_and_the_stopped_one_acts_on_nothing(tmp_path, summary):
    """kill -STOP of the active controller (alive, holding its flock, making no pass): `get` warns once
    the last pass is older than the lease term, a standby takes over after the term, and the stopped
    one, resumed, finds it lost the lease and exits without acting. Requests through the gateway go on."""
    h = Harness(tmp_path, "slurm")
    term = "5"  # the lowest the option allows: the test waits for it twice
    standby = client = None
    stopped = False
    try:
        name = h.name("fenced")
        (h.manifests / f"{name}.yaml").write_text(ROUTED.format(name=name))
        h.start("--lease-timeout", term)
        endpoint = h.wait_ready(name, timeout=90)["endpoint"]
        steps = h.steps(name)
        actions = len(h.actions(name))
        client = Client(endpoint, limit=5000)
        client.start()
        wait_until(lambda: client.ok >= 10, what="requests before the stop")
        h.proc.send_signal(signal.SIGSTOP)
        stopped = True
        t0 = time.monotonic()
        warned = wait_until(lambda: "WARNING: the active controller made no pass" in (out := h.cli("get").stdout) and out,
                            timeout=30, interval=0.5, what="get's warning past the lease term")
        assert f"active pid {h.proc.pid}" in warned and f"lease term {term}s" in warned, warned
        log = open(tmp_path / "standby.log", "ab")
        standby = subprocess.Popen(
            [sys.executable, "-m", "reconciler.cli", "run", "--manifests", str(h.manifests), "--state", str(h.state),
             "--driver", "slurm", "--resync", "1", "--standby", "--lease-timeout", term],
            stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path, env=h.env)
        wait_until(lambda: _controller(h).get("pid") == standby.pid, timeout=30, interval=0.1,
                   what="the standby's first pass")
        took = time.monotonic() - t0
        first = _controller(h)["ticks"]
        wait_until(lambda: _controller(h).get("ticks", 0) >= first + 2, timeout=30, what="2 passes of the standby")
        shown = h.cli("get").stdout
        assert f"active pid {standby.pid}" in shown and "WARNING" not in shown, shown
        h.proc.send_signal(signal.SIGCONT)
        stopped = False
        code = h.proc.wait(30)
        assert code != 0, "the fenced controller ends with an error"
        assert "another reconciler holds the state directory now; stopping" in h.log(), h.log()[-2000:]
        wait_until(lambda: _controller(h).get("ticks", 0) >= first + 4, timeout=30, what="the standby goes on")
        assert _controller(h)["pid"] == standby.pid, "the fenced one wrote nothing over the new holder's progress"
        n = client.ok
        wait_until(lambda: client.ok >= n + 20, timeout=60, what="requests after the takeover")
        client.halt.set()
        client.join(15)
        assert client.failed == [], (client.ok, client.failed[:5])
        assert h.steps(name) == steps, "adopted: the same steps, none launched twice"
        assert h.actions(name)[actions:] == []
        summary(f"stopped controller: standby's first pass {took:.1f}s after kill -STOP (lease term {term}s); "
                f"requests ok {client.ok}, failed 0")
    finally:
        if stopped:
            h.proc.send_signal(signal.SIGCONT)
        if client is not None:
            client.halt.set()
            client.join(15)
        if standby is not None and standby.poll() is None:
            standby.send_signal(signal.SIGTERM)
            standby.wait(20)
        h.cleanup()
