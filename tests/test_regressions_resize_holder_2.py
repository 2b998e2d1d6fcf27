"""Defects a second hostile review found in the fixes of the first (resize hand-over, gateway, holder):
each test failed before its fix; docstrings say the scenario."""

from __future__ import annotations

from fakes import FakeCluster, recipe
from reconciler.core.plan import CancelStep, LaunchStep
from support.recipes import AGG, agg


def vllm(gpus: int, workers: int = 2) -> dict:
    """A GPU engine (its lives never share a GPU), rolled in place one at a time."""
    text = AGG % {"workers": workers, "gpus": gpus, "frontend": "none",
                  "extra": "reconcile: {rollout: {max_unavailable: 1}}"}
    return {"r": recipe(text.replace("engine: mocker", "engine: vllm"))}


def _apply_tracking(c: FakeCluster, p, gpus: dict) -> None:
    """Apply ``p``, keeping each live step's GPUs (the fake's steps do not say them)."""
    before = set(c.steps)
    launches = [a for a in p.actions if isinstance(a, LaunchStep)]
    c.apply(p)
    new = sorted(set(c.steps) - before, key=lambda s: int(s.split(".")[1]))
    for sid, a in zip(new, launches):
        gpus[sid] = (a.job_id, a.unit.name, set(a.launch.gpus))
    for sid in list(gpus):
        if sid not in c.steps:
            del gpus[sid]


def test_a_frozen_worker_keeps_its_gpus_to_itself_while_its_neighbour_is_rolled_in_place():
    """2333c50: agg_1 (GPU 1 of job 100, which holds 2) now needs GPUs 2-3, so it is frozen on job 100,
    serving, until the 4-GPU successor runs. agg_0's new spec (GPUs 0-1) still fits job 100, so it
    is not in ``resizing`` and is rolled in place there (vllm, max_unavailable 1): its new life is
    launched on GPUs 0-1 while agg_1's frozen life runs on GPU 1, and both stay there until Slurm grants the successor (hours on a
    busy cluster): two engines on one GPU. Before the fix agg_1 was cancelled first (a gap, no
    overlap). Every worker of a job that is handed over for a resize should wait for the successor
    (it moves there anyway), or at least no launch may take a GPU a frozen life holds."""
    c = FakeCluster()
    gpus: dict = {}
    for _ in range(10):
        p = c.plan(vllm(1))
        if not p.actions:
            break
        _apply_tracking(c, p, gpus)
    c.pending = True  # the successor queues
    for tick in range(6):
        p = c.plan(vllm(2))
        _apply_tracking(c, p, gpus)
        lives = list(gpus.values())
        shared = [(a[1], b[1], a[2] & b[2]) for i, a in enumerate(lives) for b in lives[i + 1:]
                  if a[0] == b[0] and a[1] != b[1] and a[2] & b[2]]
        assert not shared, f"tick {tick}: two workers' lives on one GPU in one job: {shared}"
    # and once Slurm grants the successor, every worker moves there with its new spec: none stays frozen
    c.run_alloc()
    for _ in range(30):
        p = c.plan(vllm(2))
        if not p.actions:
            break
        _apply_tracking(c, p, gpus)
    assert not c.plan(vllm(2)).actions
    assert {a.job_id for a in c.allocs.values()} == {s.job_id for s in c.steps.values()} != {"100"}
    assert sorted(g[2] for g in gpus.values()) == [{0, 1}, {2, 3}], gpus


def test_a_frozen_failover_worker_keeps_its_engines_and_its_gms_until_the_successor_runs():
    """2333c50: ``resizing`` names the worker's engine-0 unit only (agg_1). Its shadow engine
    (agg-e1_1) and its per-worker gms (svc-gms-agg_1) are rolled in place at once: the gms the frozen
    engines share is cancelled under them, and its new life is launched on GPUs 2-3 in job 100,
    which holds 2 (Slurm refuses the step: the fake asserts). The frozen worker serves on a broken
    gms until Slurm grants the successor."""
    from support.recipes import failover_recipe as load

    c = FakeCluster()
    c.converge({"fo": load()}, rounds=80)
    frozen = {(s.role, s.index, s.step_id) for s in c.steps.values() if s.index == 1 and s.role != "frontend"}
    assert {r for r, _, _ in frozen} == {"agg", "agg-e1", "svc-gms-agg"}, frozen
    c.pending = True
    for tick in range(8):
        p = c.plan({"fo": load(gpus=2)})
        gone = [a.describe() for a in p.actions if isinstance(a, CancelStep)
                and any(a.step_id == sid for _, _, sid in frozen)]
        assert not gone, f"tick {tick}: a frozen worker's unit stopped before its successor runs: {gone}"
        c.apply(p)  # the fake asserts no step is launched on GPUs its job does not hold
    c.run_alloc()  # Slurm grants the successor: every unit moves there, none stays frozen
    c.converge({"fo": load(gpus=2)}, rounds=200)
    assert {s.job_id for s in c.steps.values()} == {a.job_id for a in c.allocs.values()} != {"100"}


def test_a_scale_up_past_the_job_does_not_hold_back_a_crashed_worker_that_fits():
    """The guard of the fix above must not go wider than the frozen lives: a scale-up (2 -> 3 workers
    of 1 GPU, job 100 holds 2) queues a successor for agg_2 but freezes no life; agg_0 crashing
    meanwhile is relaunched on its GPU 0 at once, not held until Slurm grants the successor."""
    c = FakeCluster()
    c.converge(agg(2, gpus=1))
    c.pending = True
    c.apply(c.plan(agg(3, gpus=1)))
    del c.steps[next(s for s, st in c.steps.items() if st.index == 0)]  # agg_0 crashed
    p = c.plan(agg(3, gpus=1))
    assert [(a.unit.name, a.job_id) for a in p.actions if isinstance(a, LaunchStep)] == [("agg_0", "100")]


# ---------------------------------------------------------------- 2160516: a listen change restarts nginx

import os
import signal
import threading
import time
import urllib.request
from pathlib import Path
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from reconciler.core.ports import NodePortAllocator
from reconciler.drivers.state import StateDir
from reconciler.shell.gateway.host import Gateways
from reconciler.shell.gateway.record import facts, prefix_of
from reconciler.shell.gateway.sweep import master_pid
from harness import _ranges
from tests.helpers import wait_until

CHUNKS = 14  # one a second: a stream longer than end_master's 10 s of grace


class _Slow(BaseHTTPRequestHandler):
    """A frontend streaming a long completion: one chunk a second."""

    def do_GET(self):  # noqa: N802 - http.server's name
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        try:
            for i in range(CHUNKS):
                self.wfile.write(f"data: {i}\n\n".encode())
                self.wfile.flush()
                time.sleep(1.0)
        except OSError:
            return

    def log_message(self, *a):
        pass


@pytest.mark.needs("nginx")
def test_a_listen_change_neither_cuts_a_stream_in_flight_nor_stalls_the_tick(tmp_path):
    """2160516: a listen change ends the master (shell/gateway/sweep.py:end_master: QUIT, 10 s, then
    TERM, then KILL) inside Gateways.sync, i.e. inside the reconcile tick that serves every
    deployment: with one streamed completion in flight, the tick stops for 10 s and then the stream
    is cut by the TERM — though the gateway promises a reload never cuts a stream the read timeout
    (3600 s) would let finish (gateway/__init__.py SHUTDOWN_TIMEOUT_S). nginx's master and workers
    close their listening sockets at once on QUIT, so the new master could bind as soon as the port
    is free; only the old master's exit deleting the shared nginx.pid needs care."""
    up = ThreadingHTTPServer(("127.0.0.1", 0), _Slow)
    threading.Thread(target=up.serve_forever, daemon=True).start()
    upstream = f"127.0.0.1:{up.server_address[1]}"
    g = Gateways(StateDir(tmp_path / "state"), host="127.0.0.1")
    lo = next(_ranges)
    ports = NodePortAllocator(lo, lo + 100)
    got: list[str] = []
    try:
        assert [c.kind for c in g.sync("r", [upstream], ports, 1.0, listen="0.0.0.0")] == ["GatewayStarted"]
        port = int(facts(g.state.root, "r")["url"].rsplit(":", 1)[1])

        def client():
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/stream", timeout=60) as r:
                    for line in r:
                        if line.strip():
                            got.append(line.decode().strip())
            except OSError as e:
                got.append(f"cut: {e}")

        t = threading.Thread(target=client, daemon=True)
        t.start()
        wait_until(lambda: got, what="the stream's first chunk")
        old = master_pid(prefix_of(g.state.root, "r"))
        t0 = time.monotonic()
        said = [c.kind for c in g.sync("r", [upstream], ports, 2.0, listen="127.0.0.1")]
        took = time.monotonic() - t0
        t.join(CHUNKS + 10)
        assert got[-1] == f"data: {CHUNKS - 1}", (f"the stream in flight was cut by the listen change "
                                                  f"(sync took {took:.1f}s, said {said}): {got[-3:]}")
        # the old master exits once its stream is done and deletes nginx.pid: the new one is still known,
        # and the next passes neither start another nor say anything
        new = facts(g.state.root, "r")
        assert said == ["GatewayMoved"] and new["url"] == f"http://127.0.0.1:{port}", (said, new)
        rec = g._record("r")
        assert rec["restarts"] == 0 and rec["backoff"] == 0, rec  # asked for: not a restart
        wait_until(lambda: not Path(f"/proc/{old}/cmdline").exists() or not Path(f"/proc/{old}/cmdline").read_bytes(),
                   what=f"the old master {old} gone once its stream is done")
        pid = master_pid(prefix_of(g.state.root, "r"))
        assert pid is not None and [c.kind for c in g.sync("r", [upstream], ports, 3.0, listen="127.0.0.1")] == []
        assert master_pid(prefix_of(g.state.root, "r")) == pid
    finally:
        up.shutdown()
        pid = master_pid(prefix_of(g.state.root, "r"))
        if pid:
            os.kill(pid, signal.SIGQUIT)
            wait_until(lambda: master_pid(prefix_of(g.state.root, "r")) is None, what="nginx gone")


def test_an_edit_during_a_time_limit_hand_over_keeps_the_unmoved_worker_serving_and_sizes_a_successor():
    """2333c50 keeps a worker placed on a too-small job only when its life is in the *current* job.
    Mid hand-over (job 100's time runs out, successor 101 runs, agg_0 moved, agg_1 still on 100), an
    edit tp 1 -> 2 makes agg_1 too big for 101: its only life (on retiring job 100) is cancelled at
    once as 'scaled down', the very gap the fix closes, and its wait says it waits for a successor
    sized for it, but none is submitted while job 100 still carries a step (compute_handover skips
    an index with more than one live job): it comes only after job 100's time limit kills it."""
    import dataclasses

    from reconciler.core.plan import SubmitAlloc

    c = FakeCluster()
    c.converge(agg(2, gpus=1))
    c.allocs["100"] = dataclasses.replace(c.allocs["100"], time_left="00:01:00", time_limit="04:00:00")
    for _ in range(6):  # the hand-over starts: 101 runs, agg_0's new life there
        c.apply(c.plan(agg(2, gpus=1)))
        if {s.job_id for s in c.steps.values()} == {"100", "101"}:
            break
    assert ("agg", 1, "100") in {(s.role, s.index, s.job_id) for s in c.steps.values()}
    c.pending = True
    submitted = []
    for tick in range(4):
        p = c.plan(agg(2, gpus=2))
        gone = [a.describe() for a in p.actions if isinstance(a, CancelStep) and "agg_1" in a.describe()]
        assert not gone, f"tick {tick}: agg_1's only life stopped before a job that holds its GPUs runs: {gone}"
        submitted += [a.spec.gpus_per_node for a in p.actions if isinstance(a, SubmitAlloc)]
        c.apply(p)
    assert any(g >= 4 for g in submitted), f"no successor sized for agg_1 submitted: {submitted}"
    c.run_alloc()  # granted: every worker moves there, the older jobs go
    for sid in [s for s in c.steps if s.startswith("100.")]:  # job 100's time limit (the fake's clock stands)
        del c.steps[sid]
    del c.allocs["100"]
    c.converge(agg(2, gpus=2))
    assert {s.job_id for s in c.steps.values()} == set(c.allocs) and len(c.allocs) == 1
    assert next(iter(c.allocs.values())).gpus >= 4


# ---------------------------------------------------------------- 2160516: the holder's drain


def test_a_request_held_when_the_holder_is_stopped_gets_its_json_503_not_a_bare_500(tmp_path):
    """2160516: on SIGTERM (the recipe deleted, hold_seconds edited to 0, the holder replaced) the
    holder drains for up to DRAIN_S (30 s), then closes its client session under the requests still
    waiting for a frontend: each gets aiohttp's bare '500 Internal Server Error' 30 s later, not the
    JSON 503 with Retry-After every other refusal gets (measured: 500 after 30.1 s with hold 300).
    A held request (no byte sent yet) is refused at once; what is relayed still finishes."""
    import json
    import urllib.error

    from reconciler.shell.gateway import holder_supervisor as H

    lo = next(_ranges)
    prefix = tmp_path / "g"
    pid, _ = H.ensure(prefix, H.argv(H.python(), "r", lo, lo + 1, 300, prefix), lo)  # no gateway on lo + 1
    try:
        assert H.wait_listening(lo)
        got: list = []

        def client():
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{lo}/v1/chat/completions", timeout=120).read()
                got.append(("answered", None))
            except urllib.error.HTTPError as e:
                got.append((e.code, e.read()))
            except OSError as e:
                got.append((type(e).__name__, str(e)))

        t = threading.Thread(target=client, daemon=True)
        t.start()
        wait_until(lambda: (H.stats(lo) or {}).get("held", 0) >= 1, what="the request held")
        H.stop(prefix)
        t.join(60)
        assert got and got[0][0] == 503, got
        assert json.loads(got[0][1])["error"]["code"] == 503
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass

