"""Defects a hostile review found in the resize hand-over, the GPU mapping and the gateway's holder (each test failed before its fix): docstrings say what went wrong."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from fakes import FakeCluster
from reconciler.core.plan import CancelStep, SubmitAlloc
from support.recipes import agg


@pytest.mark.parametrize("before,after", [((1, 1), (1, 2)), ((2, 2), (2, 4))])  # (workers, gpus each)
def test_a_worker_whose_own_gpus_grow_past_its_job_keeps_serving_until_its_successor_runs(before, after):
    """cb02cf8: an edit that gives a running worker more GPUs than its job holds (tp 1 -> 2) makes it
    unplaceable; its old life is cancelled at once as 'scaled down' while the successor only queues:
    the deployment serves nothing until Slurm starts a bigger job (hours, on a busy cluster). The
    commit promises a hand-over: the old life serves until the successor runs."""
    c = FakeCluster()
    c.converge(agg(before[0], gpus=before[1]))
    c.pending = True  # the successor queues
    p = c.plan(agg(after[0], gpus=after[1]))
    assert any(isinstance(a, SubmitAlloc) for a in p.actions)
    stops = [a.describe() for a in p.actions if isinstance(a, CancelStep)]
    assert stops == [], stops


# ---------------------------------------------------------------- be2f0da: reconcile.gateway.listen

import json as _json
import signal as _signal

from reconciler.shell.gateway.host import Gateways
from reconciler.shell.gateway.record import facts, prefix_of
from reconciler.shell.gateway.sweep import master_pid
from reconciler.drivers.state import StateDir
from reconciler.core.ports import NodePortAllocator
from harness import _ranges
from tests.helpers import get, wait_until


def _listening_on(port: int) -> set[str]:
    """Local addresses with a socket in LISTEN on ``port`` (/proc/net/tcp, tcp6)."""
    out = set()
    for f, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        for line in Path(f).read_text().splitlines()[1:]:
            local, st = line.split()[1], line.split()[3]
            addr, p = local.split(":")
            if st == "0A" and int(p, 16) == port:
                out.add(addr)
    return out


@pytest.mark.needs("nginx")
def test_changing_listen_on_a_running_gateway_is_applied_or_said(tmp_path):
    """be2f0da: an edit of reconcile.gateway.listen on a running gateway (0.0.0.0 -> 127.0.0.1) is
    a SIGHUP reload; `nginx -t` passes, but the master cannot bind 127.0.0.1:P while it holds
    0.0.0.0:P (EADDRINUSE, in its error.log), keeps the old sockets, and /gateway/health still
    confirms (the upstreams did not change). The record (and `get`) now says the endpoint is
    127.0.0.1 while nginx still answers on every interface: what the user asked to close stays open,
    silently, until nginx is restarted."""
    g = Gateways(StateDir(tmp_path / "state"), host="127.0.0.1")
    lo = next(_ranges)
    ports = NodePortAllocator(lo, lo + 100)
    try:
        assert [c.kind for c in g.sync("r", [], ports, 1.0, listen="0.0.0.0")] == ["GatewayStarted"]
        port = int(facts(g.state.root, "r")["url"].rsplit(":", 1)[1])
        assert "00000000" in _listening_on(port)  # 0.0.0.0
        said = [c.kind for c in g.sync("r", [], ports, 2.0, listen="127.0.0.1")]
        f = facts(g.state.root, "r")
        assert f["url"] == f"http://127.0.0.1:{port}"  # what get prints now
        bound = _listening_on(port)
        # either nginx binds what the record says, or the failure is said (GatewayFailed)
        assert bound == {"0100007F"} or "GatewayFailed" in said, (bound, said)
    finally:
        pid = master_pid(prefix_of(g.state.root, "r"))
        if pid:
            os.kill(pid, _signal.SIGQUIT)
            wait_until(lambda: master_pid(prefix_of(g.state.root, "r")) is None, what="nginx gone")


@pytest.mark.needs("nginx")
def test_listen_on_every_ipv6_address_still_answers_ipv4_clients(tmp_path, nic):
    """be2f0da: `listen: '::'` is accepted and facts() treats '[::]' like 0.0.0.0 (the endpoint is
    the host's name), but nginx binds `[::]:P` with ipv6only=on (its default): IPv4 clients of the
    host's name are refused; only loopback IPv4 answers (the extra 127.0.0.1 line). Measured by hand:
    curl http://192.0.2.2:P -> refused, http://[fd00::2]:P -> 200."""
    g = Gateways(StateDir(tmp_path / "state"), host="127.0.0.1")
    lo = next(_ranges)
    ports = NodePortAllocator(lo, lo + 100)
    try:
        assert [c.kind for c in g.sync("r", [], ports, 1.0, listen="[::]")] == ["GatewayStarted"]
        port = int(facts(g.state.root, "r")["url"].rsplit(":", 1)[1])
        assert facts(g.state.root, "r")["url"] == f"http://127.0.0.1:{port}"  # the host's name: any address
        # every IPv4 address of the host answers (0.0.0.0 bound, or [::] with ipv6only=off): an IPv4
        # client of a non-loopback address gets an HTTP answer (whatever the status: no frontend yet)
        _, ip = nic
        status, _ = get(f"http://{ip}:{port}/", timeout=10)
        assert status >= 200, (status, _listening_on(port))
    finally:
        pid = master_pid(prefix_of(g.state.root, "r"))
        if pid:
            os.kill(pid, _signal.SIGQUIT)
            wait_until(lambda: master_pid(prefix_of(g.state.root, "r")) is None, what="nginx gone")


# ---------------------------------------------------------------- be2f0da: the holder's lifecycle

from reconciler.shell.gateway import holder_supervisor as _holder
from tests.helpers import start_mocker
from support.gateways import _hp, _ports, CHAT, gw  # noqa: F401 - fixtures among them
import http.client
import threading


@pytest.mark.needs("nginx")
def test_a_hold_edit_does_not_cut_the_streams_the_holder_relays(gw, tmp_path):  # noqa: F811
    """be2f0da: every deployment's held requests are relayed by the holder for their whole life (a
    stream of minutes). An edit of reconcile.gateway.hold_seconds (or the reconciler's python path
    changing on an upgrade) replaces the holder with SIGTERM — asyncio.run with a bare AppRunner
    installs no handler, so the process dies at once and every stream it relays is cut mid-answer
    (nginx itself is reloaded gracefully; a deleted recipe's holder is killed the same way)."""
    # 400 tokens at a quarter of the mocker's speed: ~9 s of stream, so it is still under way when
    # the hold is edited however slowly a loaded host gets there
    m, m_url = start_mocker(tmp_path, "--speedup-ratio", "0.25", name="fe")
    try:
        ports = _ports()
        gw.sync("r1", [], ports, 1000.0, hold=60)
        port = gw._record("r1")["holderPort"]
        assert _holder.wait_listening(port)
        host, gport = facts(gw.state.root, "r1")["url"].removeprefix("http://").split(":")
        conn = http.client.HTTPConnection(host, int(gport), timeout=120)
        conn.request("POST", "/v1/chat/completions", body=_json.dumps(
            {**CHAT, "max_tokens": 400, "stream": True}), headers={"Content-Type": "application/json"})
        got: list = []
        reader = threading.Thread(target=lambda: got.append(conn.getresponse()), daemon=True)
        reader.start()
        wait_until(lambda: (_holder.stats(port) or {}).get("held") == 1, what="held")
        gw.sync("r1", [_hp(m_url)], ports, 1001.0, hold=60)  # a frontend: the held request streams from it
        reader.join(60)
        resp = got[0]
        first = resp.readline()
        assert resp.status == 200 and first.startswith(b"data: "), (resp.status, first)
        assert (_holder.stats(port) or {}).get("held") == 1  # relayed by the holder, still under way
        kinds = [c.kind for c in gw.sync("r1", [_hp(m_url)], ports, 1002.0, hold=30)]  # the hold edited
        assert "GatewayHolder" in kinds, kinds
        try:
            rest = resp.read()
        except (http.client.IncompleteRead, ConnectionError) as e:
            rest = repr(e).encode()
        assert rest.rstrip().endswith(b"data: [DONE]"), rest[-300:]
    finally:
        m.stop()


# ---------------------------------------------------------------- cb02cf8: drivers/base.LAUNCHER

from support.gpus import launch, run_local


@pytest.mark.parametrize("mask,inherited,seen", [
    # Slurm's gres with no File= (count-only GPUs) sets CUDA_VISIBLE_DEVICES=NoDevFiles: it is no
    # list of devices; the indices must pass as written (as before cb02cf8), not become 'NoDevFiles'
    # (logical 0) or exit 97 (logical 1: a crash loop of every worker past GPU 0)
    ("0", {"CUDA_VISIBLE_DEVICES": "NoDevFiles"}, "0"),
    ("1", {"CUDA_VISIBLE_DEVICES": "NoDevFiles"}, "1"),
])
def test_slurms_no_device_files_marker_is_no_list_of_gpus(tmp_path, mask, inherited, seen):
    rc, out, err, status = run_local(launch(mask), tmp_path, inherited)
    assert (rc, out.split("|")[0]) == (0, seen), (rc, out, err)


def test_hip_indices_are_relative_to_the_rocr_list_slurm_already_narrowed(tmp_path):
    """visible_devices_env: HIP_VISIBLE_DEVICES (unset in the step) falls back to Slurm's
    CUDA_VISIBLE_DEVICES=4,5 and becomes HIP_VISIBLE_DEVICES=4,5 — but Slurm also set
    ROCR_VISIBLE_DEVICES=4,5 (its AMD env), which the ROCm runtime applies first, renumbering those
    GPUs 0,1: HIP index 4 names no device. Before cb02cf8 the worker got 0,1, which was right."""
    l = replace(launch("0,1", var="HIP_VISIBLE_DEVICES"),
                argv=("/bin/sh", "-c", 'printf "%s" "${HIP_VISIBLE_DEVICES-unset}"'))
    rc, out, err, _ = run_local(l, tmp_path, {"CUDA_VISIBLE_DEVICES": "4,5", "ROCR_VISIBLE_DEVICES": "4,5"})
    assert (rc, out) == (0, "0,1"), (rc, out, err)


def _state(pid: int) -> str:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return "gone"
    return next(l.split()[1] for l in text.splitlines() if l.startswith("State:"))


def test_a_stopped_holder_leaves_no_zombie(tmp_path):
    """be2f0da: holders are now one per deployment, children of the reconciler; ensure() reaps the
    dead ones only at the next start of some holder. A holder stopped (hold_seconds: 0, a deleted
    recipe) or one that died stays a zombie of the long-lived reconciler until then."""
    lo = next(_ranges)
    prefix = tmp_path / "g"
    pid, did = _holder.ensure(prefix, _holder.argv(_holder.python(), "r", lo, lo + 1, 5, prefix), lo)
    assert pid is not None and did == "started"
    assert _holder.wait_listening(lo)
    assert _holder.stop(prefix) == pid
    # a holder slower to end than stop()'s wait is reaped by a thread a moment after it exits: a
    # zombie for that moment; one never reaped stays one, and this times out
    wait_until(lambda: _state(pid) == "gone", timeout=10, what=f"holder {pid} reaped (not a zombie of this process)")


def _fake_frontend(port: int, post, keep_alive: bool = False):
    """A frontend on 127.0.0.1:``port`` that is also its own gateway's ``/gateway/health`` (listing
    itself), so a holder pointed at it finds it; ``post(handler)`` answers each POST. Started."""
    import http.server

    class Frontend(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1" if keep_alive else "HTTP/1.0"

        def log_message(self, *a):
            pass

        def do_GET(self):
            self.answer(200, _json.dumps({"upstreams": [f"127.0.0.1:{port}"]}).encode())

        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            post(self)

        def answer(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", port), Frontend)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def test_one_request_a_frontend_refuses_with_503_is_not_sent_to_it_again_and_again(tmp_path):
    """be2f0da: every gateway now sends a request its frontends answered 503 to the holder, which
    re-sends the whole request to a frontend every POLL_S (0.2 s) until hold_seconds (10 s by
    default) — also when the 503 is the frontend's own answer to overload (a router with no healthy
    worker, a full queue): one client request becomes ~50 requests to an overloaded frontend, per
    client, with no backoff and no cap on the requests held at once. Before, such a deployment
    answered the client's 503 at once."""
    hits = []
    lo = next(_ranges)
    fe_port, holder_port = lo, lo + 1

    def overloaded(h) -> None:
        hits.append(h.path)
        h.answer(503, b'{"error": "overloaded"}')

    srv = _fake_frontend(fe_port, overloaded)
    prefix = tmp_path / "g"
    try:
        pid, _ = _holder.ensure(prefix, _holder.argv(_holder.python(), "r", holder_port, fe_port, 2, prefix),
                                holder_port)
        assert _holder.wait_listening(holder_port)
        conn = http.client.HTTPConnection("127.0.0.1", holder_port, timeout=30)
        conn.request("POST", "/v1/chat/completions", body=_json.dumps(CHAT), headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        r.read()
        assert r.status == 503
        assert len(hits) <= 3, f"one client request, hold 2 s: {len(hits)} requests to the overloaded frontend"
    finally:
        _holder.stop(prefix)
        srv.shutdown()


def test_the_resize_wait_does_not_say_its_nodes_straddle_an_allocation():
    """cb02cf8: a worker waiting for a successor sized for it is a WaitReason.UNPLACEABLE, whose
    text is 'its nodes straddle an existing allocation' — `describe` shows 'its nodes straddle an
    existing allocation: uses GPU 2, job 100 holds 2 per node: ...' for a worker whose nodes
    straddle nothing."""
    c = FakeCluster()
    c.converge(agg(2))
    w = c.plan(agg(4)).recipes["r"].waiting["agg_2"]
    assert "straddle" not in f"{w.reason.value}: {w.detail}", w


def test_the_holder_relays_more_than_100_streams_at_once(tmp_path):
    """be2f0da: the holder relays every held request for its whole answer through one aiohttp
    ClientSession, whose connector allows 100 connections (aiohttp's default) — and polls the
    gateway's /gateway/health through the same pool. With 100 long answers under way (a relaunch
    blip at 100 req/s of streaming completions), the 101st held request cannot even read the list
    of frontends (2 s timeout: []) and gets the 503 after hold_seconds although a frontend answers."""
    lo = next(_ranges)
    fe_port, holder_port = lo, lo + 1
    release = threading.Event()

    def long_answer(h) -> None:
        h.send_response(200)
        h.send_header("Content-Length", "2")
        h.end_headers()
        h.wfile.write(b"a")
        h.wfile.flush()
        release.wait(30)  # a long answer: the second byte comes when the test ends
        try:
            h.wfile.write(b"b")
        except OSError:
            pass

    srv = _fake_frontend(fe_port, long_answer, keep_alive=True)
    prefix = tmp_path / "g"
    firsts: list = []

    def client():
        try:
            conn = http.client.HTTPConnection("127.0.0.1", holder_port, timeout=60)
            conn.request("POST", "/v1/x", body=b"{}", headers={"Content-Type": "application/json"})
            r = conn.getresponse()
            firsts.append((r.status, r.read(1)))
            release.wait(30)
        except OSError:  # the holder stopped at the test's end
            pass

    try:
        _holder.ensure(prefix, _holder.argv(_holder.python(), "r", holder_port, fe_port, 4, prefix), holder_port)
        assert _holder.wait_listening(holder_port)
        for _ in range(100):
            threading.Thread(target=client, daemon=True).start()
        wait_until(lambda: len(firsts) == 100, timeout=60, what="100 answers under way through the holder")
        t = threading.Thread(target=client, daemon=True)
        t.start()
        t.join(20)
        assert firsts[100:] == [(200, b"a")], firsts[100:]
    finally:
        release.set()
        _holder.stop(prefix)
        srv.shutdown()


def test_a_second_edit_while_the_resize_successor_queues_is_one_hand_over_not_two():
    """cb02cf8: job 100 holds 2; the file packs 4 (successor 101 for 4 queues), then 6 while 101
    still queues. compute_handover skips an index with a queued successor (len(held) > 1) and never
    checks that the successor is itself too small: once 101 runs, every worker moves onto it, then
    agg_4/agg_5 find it short and a third job (6) is submitted and every worker moves again — two
    hand-overs (10 launches for 6 workers; each a queue wait on a busy cluster). (Jobs labelled
    before desired/baseline.py: a labelled one keeps its workers, the added ones get jobs of their own.)"""
    from reconciler.core.plan import LaunchStep

    c = FakeCluster(packed_labels=False)
    c.converge(agg(2))
    c.pending = True
    c.apply(c.plan(agg(4)))
    c.apply(c.plan(agg(6)))
    c.pending = False
    c.run_alloc()
    launches = 0
    for _ in range(40):
        p = c.plan(agg(6))
        if not p.actions:
            break
        launches += sum(isinstance(a, LaunchStep) for a in p.actions)
        c.apply(p)
    assert [a.gpus for a in c.allocs.values()] == [6]
    assert launches == 6, f"{launches} launches for 6 workers"


def test_a_holder_whose_gateway_directory_was_wiped_ends_even_if_it_is_made_again(tmp_path):
    """be2f0da (every deployment has a holder now): the holder exits once its gateway's directory
    is gone — checked by path every 2 s (watch_prefix). State wiped under a running reconciler and
    made again by it (the same path, a new directory with no holder.pid) within those 2 s: the old
    holder lives on, unknown to the reconciler (its pid file went with the old directory), holding
    its port. Seen in the soak run: a holder with cwd '(deleted)' of test_wiping_state_under_a_run..."""
    import shutil

    lo = next(_ranges)
    prefix = tmp_path / "g"
    pid, _ = _holder.ensure(prefix, _holder.argv(_holder.python(), "r", lo, lo + 1, 5, prefix), lo)
    assert _holder.wait_listening(lo)
    try:
        shutil.rmtree(prefix)
        prefix.mkdir()  # the restarted reconciler makes the gateway's directory again
        deadline = __import__("time").monotonic() + 8
        while _state(pid) not in ("Z", "gone") and __import__("time").monotonic() < deadline:
            __import__("time").sleep(0.2)
        assert _state(pid) in ("Z", "gone"), f"holder {pid} outlived its gateway directory"
    finally:
        if _state(pid) not in ("Z", "gone"):
            os.kill(pid, _signal.SIGTERM)


def test_an_empty_404_is_a_frontend_not_ready_yet_a_404_with_a_body_is_handed_back(tmp_path):
    """Measured (benchmarks/continuity.py, the only Dynamo frontend killed): its new life answered
    an empty 404 for ~0.3 s, before it had read the model's registration, and 30-57 requests of a
    client loop failed. The gateway passes a 404 to the holder, which tries an empty one again
    and hands a real one (with a body) back at once."""
    import time as _time

    lo = next(_ranges)
    fe_port, holder_port = lo, lo + 1
    answers = [b"", b"", b'{"error": "model not found: x"}']  # two empty 404s, then a real one
    hits: list = []

    def not_found(h) -> None:
        body = answers[min(len(hits), len(answers) - 1)]
        hits.append(body)
        h.answer(404, body)

    srv = _fake_frontend(fe_port, not_found)
    prefix = tmp_path / "g"
    try:
        _holder.ensure(prefix, _holder.argv(_holder.python(), "r", holder_port, fe_port, 10, prefix), holder_port)
        assert _holder.wait_listening(holder_port)
        conn = http.client.HTTPConnection("127.0.0.1", holder_port, timeout=30)
        t0 = _time.monotonic()
        conn.request("POST", "/v1/chat/completions", body=_json.dumps(CHAT), headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        assert (r.status, r.read()) == (404, b'{"error": "model not found: x"}') and len(hits) == 3, hits
        assert _time.monotonic() - t0 < 9, "handed back, not held for the whole hold"
    finally:
        _holder.stop(prefix)
        srv.shutdown()
