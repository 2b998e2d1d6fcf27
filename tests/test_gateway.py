"""The gateway on its own: the rendered nginx config, and a real nginx (Debian's) in front of real
mocker engines — stable address, graceful reloads, retries of requests no upstream answered,
restart after a crash, adoption by a restarted reconciler."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import http.client
from pathlib import Path

import pytest

from reconciler.gateway import GatewayConfig, render
from reconciler.shell.gateway.host import Gateways
from reconciler.shell.gateway.local import stop_orphans
from reconciler.shell.gateway.record import facts, prefix_of, record_path
from reconciler.shell.gateway.sweep import master_pid
from reconciler.drivers.state import StateDir
from load import scaled
from tests.helpers import get, post, start_mocker, wait_until
from support.gateways import CHAT, _ports, _hp, gw, _Drops  # noqa: F401 - fixtures among them



# ---------------------------------------------------------------- the config (pure)
def test_render_upstreams_retry_policy_and_no_frontend():
    text = render(GatewayConfig("r1", 20001, Path("/s/r1/gateway"), ("gpu01:20010", "gpu02:20011")))
    assert "server gpu01:20010 max_fails=1 fail_timeout=5s;" in text
    assert "server gpu02:20011 max_fails=1 fail_timeout=5s;" in text
    # a POST whose frontend died before answering is sent to another (completions have no side effects)
    assert "proxy_next_upstream error timeout http_503 http_404 non_idempotent;" in text
    assert "proxy_buffering off;" in text and "listen 0.0.0.0:20001" in text
    # a reload never cuts a stream the read timeout allows; a login node's 1024 files are raised
    assert "worker_shutdown_timeout 3600s;" in text and "proxy_read_timeout 3600s;" in text
    assert "worker_rlimit_nofile 8256;" in text and "worker_connections 4096;" in text
    empty = render(GatewayConfig("r1", 20001, Path("/s/r1/gateway")))
    assert "upstream frontends" not in empty and "proxy_pass" not in empty and "return 503" in empty and "no Ready frontend" in empty
    assert render(GatewayConfig("r1", 20001, Path("/s/g"), ("a:1",))) == render(GatewayConfig("r1", 20001, Path("/s/g"), ("a:1",)))


@pytest.mark.parametrize("cfg, where", [
    (GatewayConfig("r1", 0, Path("/s")), "port"),
    (GatewayConfig("r1", 1, Path("/s"), ("a:1; include /etc/passwd",)), "upstream"),
    (GatewayConfig("r1", 1, Path("/s"), ("nohostport",)), "upstream"),
    (GatewayConfig("r1", 1, Path("/s"), listen="0.0.0.0; include /x"), "address"),
    (GatewayConfig("r'1", 1, Path("/s")), "recipe name"),
])
def test_render_refuses_text_nginx_would_parse(cfg, where):
    with pytest.raises(ValueError, match=where):
        render(cfg)


def test_no_path_is_written_into_the_config():
    """Every path is relative to nginx's -p (an argv item): a state directory named with a space,
    a quote, a $ or a # cannot break the config or reach nginx as syntax."""
    odd = Path("/srv/my state/it's $HOME #1/r1/gateway")
    text = render(GatewayConfig("r1", 20001, odd, ("gpu01:20010",)))
    assert str(odd) not in text and "/srv" not in text


# ---------------------------------------------------------------- a real nginx
needs_nginx = pytest.mark.needs("nginx")


@needs_nginx
def test_gateway_serves_ready_frontends_reloads_and_keeps_its_address(gw, tmp_path):
    a, a_url = start_mocker(tmp_path, "--speedup-ratio", "100", name="a")
    b, b_url = start_mocker(tmp_path, "--speedup-ratio", "1", name="b")
    try:
        ports = _ports()
        changes = gw.sync("r1", [], ports, 1000.0)
        assert [c.kind for c in changes] == ["GatewayStarted"]
        f = facts(gw.state.root, "r1")
        assert f["up"] and f["url"].startswith("http://127.0.0.1:")
        url = f["url"]
        status, body = post(url + "/v1/chat/completions", CHAT)
        assert status == 503 and b"no Ready frontend" in body
        # a frontend becomes Ready: a graceful reload, same address
        assert [c.kind for c in gw.sync("r1", [_hp(a_url)], ports, 1001.0)] == ["GatewayReloaded"]
        wait_until(lambda: post(url + "/v1/chat/completions", CHAT)[0] == 200, what="served through the gateway")
        assert gw.sync("r1", [_hp(a_url)], ports, 1002.0) == []  # nothing changed: no reload
        # a long streaming request (slow engine b) survives a reload that removes its upstream
        gw.sync("r1", [_hp(b_url)], ports, 1003.0)
        wait_until(lambda: f"{_hp(b_url)}" in (Path(prefix_of(gw.state.root, "r1")) / "nginx.conf").read_text())
        pid = master_pid(prefix_of(gw.state.root, "r1"))
        host, port = url.removeprefix("http://").split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=60)
        import json
        conn.request("POST", "/v1/chat/completions", body=json.dumps(
            {**CHAT, "max_tokens": 40, "stream": True}), headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        first = resp.readline()
        assert resp.status == 200 and first.startswith(b"data: "), (resp.status, first, resp.read())
        assert [c.kind for c in gw.sync("r1", [_hp(a_url)], ports, 1004.0)] == ["GatewayReloaded"]
        rest = resp.read()  # the old worker finishes the stream after the reload
        assert rest.rstrip().endswith(b"data: [DONE]")
        assert master_pid(prefix_of(gw.state.root, "r1")) == pid  # a reload, not a restart
        assert facts(gw.state.root, "r1")["url"] == url
    finally:
        a.stop()
        b.stop()


@needs_nginx
def test_retry_what_no_upstream_answered(gw, tmp_path):
    ok, ok_url = start_mocker(tmp_path, "--speedup-ratio", "100", name="ok")
    drops = _Drops()
    drops.start()
    refused = socket.socket()
    refused.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
    try:
        ports = _ports()
        gw.sync("r1", [_hp(ok_url), "127.0.0.1:%d" % refused.getsockname()[1]], ports, 1.0)
        url = facts(gw.state.root, "r1")["url"]
        # a refused connection never reached a frontend: every POST is retried and answered
        assert [post(url + "/v1/chat/completions", CHAT)[0] for _ in range(6)] == [200] * 6
        # an upstream that read the POST and died before answering (a frontend killed under a
        # request): the request goes to the other frontend, the client never sees the failure
        gw.sync("r1", [_hp(ok_url), drops.addr], ports, 2.0)
        wait_until(lambda: drops.addr in (prefix_of(gw.state.root, "r1") / "nginx.conf").read_text())
        codes = [post(url + "/v1/chat/completions", CHAT)[0] for _ in range(6)]
        assert drops.seen >= 1 and codes == [200] * 6, (drops.seen, codes)
        # an upstream that answers 503 (a Dynamo frontend whose workers are gone): the next one serves
        busy = _Drops(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        busy.start()
        try:
            gw.sync("r1", [_hp(ok_url), busy.addr], ports, 3.0)
            wait_until(lambda: busy.addr in (prefix_of(gw.state.root, "r1") / "nginx.conf").read_text())
            codes = [post(url + "/v1/chat/completions", CHAT)[0] for _ in range(6)]
            assert busy.seen >= 1 and codes == [200] * 6, (busy.seen, codes)
        finally:
            busy.sock.close()
    finally:
        ok.stop()
        drops.sock.close()
        refused.close()


@needs_nginx
def test_a_port_held_by_another_process_is_said_and_waited_for_keeping_the_address(gw, tmp_path):
    """Issue 27 review finding 6: the gateway's port taken by a foreign process (while it was
    down) made every start run nginx's own bind retries (a stalled tick each time), and said
    only "nginx did not start". Now: said at once, named, and the address is kept."""
    a, a_url = start_mocker(tmp_path, "--speedup-ratio", "100", name="a")
    squatter = socket.socket()
    try:
        ports = _ports()
        gw.sync("r1", [_hp(a_url)], ports, 10.0)
        url = facts(gw.state.root, "r1")["url"]
        pid = master_pid(prefix_of(gw.state.root, "r1"))
        os.kill(pid, signal.SIGQUIT)
        wait_until(lambda: master_pid(prefix_of(gw.state.root, "r1")) is None, what="master gone")
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        wait_until(lambda: _try_bind(squatter, int(url.rsplit(":", 1)[1])), what="the port taken")
        squatter.listen(1)
        changes = gw.sync("r1", [_hp(a_url)], ports, 11.0)
        assert [c.kind for c in changes] == ["GatewayFailed"] and "held by another process" in changes[0].message
        assert facts(gw.state.root, "r1")["url"] == url  # the endpoint is not moved
        squatter.close()
        later = 11.0 + 60  # past the restart backoff
        assert [c.kind for c in gw.sync("r1", [_hp(a_url)], ports, later)] == ["GatewayRestarted"]
        assert facts(gw.state.root, "r1")["url"] == url
        wait_until(lambda: post(url + "/v1/chat/completions", CHAT)[0] == 200, what="served again")
    finally:
        squatter.close()
        a.stop()


def _try_bind(s: socket.socket, port: int) -> bool:
    try:
        s.bind(("0.0.0.0", port))
        return True
    except OSError:
        return False


@needs_nginx
def test_a_master_that_dies_wakes_the_loop_each_time(tmp_path):
    """The loop hears of a gateway's death at once (no wait for the resync), from one watcher
    thread for all masters — a thread each died past descriptor 1023 (tick.py, 1,000 gateways)."""
    woke = threading.Semaphore(0)
    state = StateDir(tmp_path / "state")
    g = Gateways(state, host="127.0.0.1", wake=woke.release)
    ports = _ports()
    watchers = [t.name for t in threading.enumerate()].count("exit-watch")  # other tests' in this process
    try:
        for now in (1.0, 2.0):  # started, then restarted after its death: watched again
            said = g.sync("r1", [], ports, now)
            pid = master_pid(prefix_of(state.root, "r1"))
            assert pid is not None, f"no master after the sync at {now}: {said}"
            os.kill(pid, signal.SIGKILL)
            assert woke.acquire(timeout=20), f"no wake-up for the death of master {pid} (sync at {now})"
            wait_until(lambda: master_pid(prefix_of(state.root, "r1")) is None, what="master gone")
        names = [t.name for t in threading.enumerate()]
        assert names.count("exit-watch") <= watchers + 1 and not [n for n in names if n.startswith("gateway-watch")], names
    finally:
        # a master killed with SIGKILL leaves its workers (ppid 1) holding the port: they are the
        # record's, told to quit here as the gateway's own restart does (stop_orphans)
        rec = json.loads(record_path(state.root, "r1").read_text())
        stop_orphans(list(rec.get("workers") or []), rec["port"])
        pid = master_pid(prefix_of(state.root, "r1"))
        if pid:
            os.kill(pid, signal.SIGQUIT)
        wait_until(lambda: not any(f":{rec['port']} " in line for line in _listening()),
                   what="no nginx left on the gateway's port")


def _listening() -> list[str]:
    import subprocess

    return subprocess.run(["ss", "-ltnH"], capture_output=True, text=True).stdout.splitlines()


@needs_nginx
def test_a_state_directory_with_odd_characters_serves(tmp_path):
    """Issue 27 review: a state path with a space, a quote, a $ or a # kept the recipe NotReady
    (the config test refused it); nginx now reads every path relative to its -p."""
    state = StateDir(tmp_path / "my state" / "it's $HOME #1")
    g = Gateways(state, host="127.0.0.1")
    a, a_url = start_mocker(tmp_path, "--speedup-ratio", "100", name="a")
    try:
        assert [c.kind for c in g.sync("r1", [_hp(a_url)], _ports(), 1.0)] == ["GatewayStarted"]
        url = facts(state.root, "r1")["url"]
        wait_until(lambda: post(url + "/v1/chat/completions", CHAT)[0] == 200, what="served")
        assert (prefix_of(state.root, "r1") / "nginx.pid").exists()  # where -p says, not in the text
    finally:
        a.stop()
        pid = master_pid(prefix_of(state.root, "r1"))
        if pid:
            os.kill(pid, signal.SIGQUIT)
            wait_until(lambda: master_pid(prefix_of(state.root, "r1")) is None, what="nginx gone")


@needs_nginx
def test_with_no_frontend_alive_the_first_to_listen_again_is_served_at_once(gw):
    """Every frontend died (issue 27, the only frontend's gap): the gateway keeps the addresses
    they are relaunched at, unproven (no failure counted), so the first to listen again takes the
    next request with no probe, canary or reload in between; until then a request gets a JSON 503."""
    socks = [socket.socket() for _ in range(2)]
    for s in socks:
        s.bind(("127.0.0.1", 0))  # bound, not listening: refused, as a dead frontend's port
    addrs = sorted("127.0.0.1:%d" % s.getsockname()[1] for s in socks)
    back = None
    try:
        ports = _ports()
        gw.sync("r1", addrs, ports, 1.0, unproven=True)
        url = facts(gw.state.root, "r1")["url"]
        conf = prefix_of(gw.state.root, "r1") / "nginx.conf"
        text = conf.read_text()
        for _ in range(4):  # each refused by both (with failures counted, both would now rest 5 s)
            status, body = post(url + "/v1/chat/completions", CHAT)
            assert status == 503 and b"no frontend behind the gateway answered" in body, (status, body)
        back = _Drops(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok", sock=socks[1])
        back.start()  # one frontend listens again, at its old address
        assert [post(url + "/v1/chat/completions", CHAT)[0] for _ in range(4)] == [200] * 4
        assert conf.read_text() == text  # served by the same config: nothing was reloaded
        # once it is Ready it is a proven upstream again (failures counted): one reload
        alive = "127.0.0.1:%d" % socks[1].getsockname()[1]
        assert [c.kind for c in gw.sync("r1", [alive], ports, 2.0)] == ["GatewayReloaded"]
        assert "max_fails=1" in conf.read_text()
    finally:
        for s in socks:
            s.close()


@needs_nginx
def test_dead_gateway_restarts_on_its_address_and_a_new_reconciler_adopts_it(gw, tmp_path):
    a, a_url = start_mocker(tmp_path, "--speedup-ratio", "100", name="a")
    try:
        ports = _ports()
        gw.sync("r1", [_hp(a_url)], ports, 10.0)
        url = facts(gw.state.root, "r1")["url"]
        pid = master_pid(prefix_of(gw.state.root, "r1"))
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: master_pid(prefix_of(gw.state.root, "r1")) is None, what="master gone")
        changes = gw.sync("r1", [_hp(a_url)], ports, 11.0)  # the first restart is immediate
        assert [c.kind for c in changes] == ["GatewayRestarted"]
        f = facts(gw.state.root, "r1")
        assert f["url"] == url and f["restarts"] == 1 and f["pid"] != pid
        wait_until(lambda: post(url + "/v1/chat/completions", CHAT)[0] == 200, what="served after restart")
        # killed again at once: the second restart waits its backoff (1 s from the exit)
        os.kill(f["pid"], signal.SIGKILL)
        wait_until(lambda: master_pid(prefix_of(gw.state.root, "r1")) is None, what="master gone")
        assert gw.sync("r1", [_hp(a_url)], ports, 12.0) == []
        assert gw.sync("r1", [_hp(a_url)], ports, 12.5) == []
        assert [c.kind for c in gw.sync("r1", [_hp(a_url)], ports, 13.0)] == ["GatewayRestarted"]
        # a new reconciler process (fresh objects, empty port registry) finds the same address and master
        pid2 = master_pid(prefix_of(gw.state.root, "r1"))
        again = Gateways(StateDir(gw.state.root), host="127.0.0.1")
        fresh = _ports()
        assert again.sync("r1", [_hp(a_url)], fresh, 14.0) == []
        assert master_pid(prefix_of(gw.state.root, "r1")) == pid2
        assert facts(gw.state.root, "r1")["url"] == url
        host, port = url.removeprefix("http://").split(":")
        assert fresh.lookup(host, "r1/gateway", "http") == int(port)
    finally:
        a.stop()


@needs_nginx
def test_taken_port_is_skipped_and_stop_releases(gw, tmp_path):
    ports = _ports()
    blocker = socket.socket()
    # a gateway of an earlier test in this range leaves its port in TIME_WAIT (the test port span
    # may lie in the host's ephemeral range too): a listener may still take it, as nginx does
    blocker.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    blocker.bind(("0.0.0.0", ports.base))
    blocker.listen(1)
    try:
        gw.sync("r1", [], ports, 1.0)
        f = facts(gw.state.root, "r1")
        assert f["up"] and not f["url"].endswith(f":{ports.base}")
        assert get(f["url"] + "/gateway/health")[0] == 200
        assert [c.kind for c in gw.stop("r1", ports)] == ["GatewayStopped"]
        wait_until(lambda: master_pid(prefix_of(gw.state.root, "r1")) is None, what="nginx stopped")
        assert ports.lookup("127.0.0.1", "r1/gateway", "http") is None and facts(gw.state.root, "r1") is None
    finally:
        blocker.close()


@needs_nginx
def test_a_config_nginx_refuses_is_not_taken_for_served_and_is_tried_again(gw, tmp_path):
    ok, ok_url = start_mocker(tmp_path, "--speedup-ratio", "100", name="ok")
    try:
        ports = _ports()
        gw.sync("r1", [_hp(ok_url)], ports, 1.0)
        conf = prefix_of(gw.state.root, "r1") / "nginx.conf"
        served = conf.read_text()
        # an upstream name that does not resolve: nginx -t refuses the config
        bad = ["no-such-host.invalid:1"]
        assert [c.kind for c in gw.sync("r1", bad, ports, 2.0)] == ["GatewayFailed"]
        rec = facts(gw.state.root, "r1")
        assert rec["upstreams"] == [_hp(ok_url)]  # what nginx serves, not what was asked
        assert conf.read_text() == served  # the running master's file is left as it serves
        assert gw.sync("r1", bad, ports, 3.0) == []  # tried again, the same failure not told twice
        assert "no-such-host" not in conf.read_text()
        url = rec["url"]
        assert post(url + "/v1/chat/completions", CHAT)[0] == 200  # still served meanwhile
        gw.sync("r1", [], ports, 4.0)
        assert facts(gw.state.root, "r1")["upstreams"] == []
    finally:
        ok.stop()


@needs_nginx
def test_quit_under_finds_a_gateway_whose_state_was_wiped(gw, tmp_path):
    """A state directory removed under a running reconciler takes the pid file with it: the master
    is found by its process (its -p prefix), so a test session or a benchmark leaves none behind."""
    from reconciler.shell.gateway.sweep import quit_under

    gw.sync("r1", [], _ports(), 1.0)
    prefix = prefix_of(gw.state.root, "r1")
    pid = master_pid(prefix)
    assert pid is not None
    (prefix / "nginx.pid").unlink()
    assert quit_under(gw.state.root) == [pid]
    wait_until(lambda: not Path(f"/proc/{pid}").exists() or b"nginx" not in Path(f"/proc/{pid}/cmdline").read_bytes(),
               what="the wiped gateway's master gone")


@needs_nginx
def test_quit_under_also_quits_the_workers_of_a_killed_master(gw):
    """A master killed with SIGKILL (a test failing midway through a crash scenario) leaves its
    workers holding the port with no master to tell: the sweep quits those on a recorded port."""
    from reconciler.shell.gateway.sweep import quit_under

    gw.sync("r1", [], _ports(), 1.0)
    rec = json.loads(record_path(gw.state.root, "r1").read_text())
    (worker,) = rec["workers"]
    os.kill(rec["pid"], signal.SIGKILL)
    wait_until(lambda: master_pid(prefix_of(gw.state.root, "r1")) is None, what="master gone")
    assert worker in quit_under(gw.state.root)
    wait_until(lambda: not Path(f"/proc/{worker}").exists(), what=f"orphan worker {worker} gone")


def test_quit_under_tells_a_master_not_the_fork_that_still_bears_its_name(tmp_path):
    """A worker just forked by the master has the master's command line until it renames itself
    (soak run 3 found two 'masters'): only the process whose parent is not one of them is told."""
    import subprocess
    import sys

    from reconciler.shell.gateway.sweep import quit_under

    title = f"nginx: master process /usr/sbin/nginx -p {tmp_path}/r1/gateway/"
    code = "import os, signal, sys, time; signal.signal(signal.SIGQUIT, lambda *a: sys.exit(0))\n" \
           "if os.fork() == 0:\n    time.sleep(60)\nelse:\n    time.sleep(60)"
    parent = subprocess.Popen(["bash", "-c", f'exec -a "{title}" {sys.executable} -c "$0"', code])
    try:
        child = wait_until(lambda: [int(c) for c in Path(f"/proc/{parent.pid}/task/{parent.pid}/children")
                                    .read_text().split()], what="the fork")[0]
        assert quit_under(tmp_path) == [parent.pid]
        assert parent.wait(10) == 0  # told (SIGQUIT), it left
        assert Path(f"/proc/{child}").exists(), "the fork was not told"
        os.kill(child, signal.SIGKILL)
    finally:
        parent.kill()
        parent.wait()


@needs_nginx
def test_a_gateway_that_runs_but_does_not_answer_is_down_until_it_answers_again(gw):
    """End to end: a stopped nginx worker keeps the port and the master lives, yet answers
    nothing. The probe (GET /gateway/health, at most one per interval) says so after
    PROBE_FAILURES in a row, in the facts that get/describe/Ready read, with an event once per
    episode."""
    from reconciler.shell.gateway.answering import PROBE_EVERY, PROBE_FAILURES, GatewayProbe

    probe_gateways = GatewayProbe().probe  # one controller's: paced by its own last probe

    gw.sync("r1", [], _ports(), 1.0)
    assert probe_gateways(gw.state, ["r1"], 1.0) == [] and facts(gw.state.root, "r1")["up"]
    worker, = json.loads(record_path(gw.state.root, "r1").read_text())["workers"]
    os.kill(worker, signal.SIGSTOP)
    t = 1.0
    try:
        assert probe_gateways(gw.state, ["r1"], t + PROBE_EVERY / 2) == [], "not due yet: paced"
        for _ in range(PROBE_FAILURES - 1):  # one slow answer is not an outage
            t += PROBE_EVERY
            assert probe_gateways(gw.state, ["r1"], t) == [] and facts(gw.state.root, "r1")["up"]
        t += PROBE_EVERY
        said = probe_gateways(gw.state, ["r1"], t)
        assert [c.kind for c in said] == ["GatewayNotAnswering"], said
        f = facts(gw.state.root, "r1")
        assert f["pid"] and not f["up"] and f["reason"].startswith("not answering: GET http://127.0.0.1:"), f
        t += PROBE_EVERY
        assert probe_gateways(gw.state, ["r1"], t) == [], "said once per episode"
    finally:
        os.kill(worker, signal.SIGCONT)
    said = probe_gateways(gw.state, ["r1"], t + PROBE_EVERY)
    assert [c.kind for c in said] == ["GatewayAnswering"] and facts(gw.state.root, "r1")["up"], said


@needs_nginx
def test_a_restart_quits_the_orphan_workers_its_record_missed(gw):
    """A master killed with SIGKILL leaves its workers holding the port. The restart tells them to
    quit — those its record lists, and any orphaned nginx worker found listening on the port (a
    record written before its workers were up lists none)."""
    ports = _ports()
    gw.sync("r1", [], ports, 1.0)
    path = record_path(gw.state.root, "r1")
    rec = json.loads(path.read_text())
    (worker,) = rec["workers"]
    path.write_text(json.dumps({**rec, "workers": []}))  # the record missed them
    os.kill(rec["pid"], signal.SIGKILL)
    wait_until(lambda: master_pid(prefix_of(gw.state.root, "r1")) is None, what="master gone")
    said = gw.sync("r1", [], ports, 2.0)
    assert [c.kind for c in said] == ["GatewayRestarted"], [c.message for c in said]
    wait_until(lambda: not Path(f"/proc/{worker}").exists(), what=f"orphan worker {worker} gone")


def test_bound_to_one_address_it_also_answers_on_loopback_and_that_address_is_the_endpoint(tmp_path):
    """reconcile.gateway.listen: nginx binds that address, plus loopback for the reconciler's probe
    and the holder; `get` prints that address (not the host's name, which may resolve elsewhere)."""
    one = render(GatewayConfig("r", 20001, Path("/s/g"), ("a:1",), listen="10.1.2.3"))
    assert "listen 10.1.2.3:20001 backlog=4096;\n        listen 127.0.0.1:20001 backlog=4096;" in one
    assert render(GatewayConfig("r", 20001, Path("/s/g"), ("a:1",), listen="127.0.0.1")).count("listen ") == 1
    assert render(GatewayConfig("r", 20001, Path("/s/g"), ("a:1",))).count("listen 0.0.0.0:20001 ") == 1
    rec = record_path(tmp_path, "r")
    rec.parent.mkdir(parents=True)
    for listen, url in ((None, "http://login1:20001"), ("0.0.0.0", "http://login1:20001"),
                        ("127.0.0.1", "http://127.0.0.1:20001"), ("[::1]", "http://[::1]:20001")):
        rec.write_text(json.dumps({"host": "login1", "port": 20001, **({"listen": listen} if listen else {})}))
        assert facts(tmp_path, "r")["url"] == url


def _binds_beside(port: int) -> bool:
    """Whether a socket of this user with SO_REUSEPORT can bind the gateway's port beside it."""
    s = socket.socket()
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        s.bind(("127.0.0.1", port))
        return True
    except OSError:
        return False
    finally:
        s.close()


@needs_nginx
def test_a_renamed_deployments_gateway_takes_the_old_ones_address_beside_it(gw, tmp_path):
    """A rename (core/plan/rename.py): the old gateway is reloaded with SO_REUSEPORT, the new one
    starts on its address beside it, the old one stops: one address throughout, answering. Given
    up mid-way, the new one stops and the old one has its port back in the registry."""
    a, a_url = start_mocker(tmp_path, "--speedup-ratio", "100", name="a")
    try:
        ports = _ports()
        gw.sync("old", [_hp(a_url)], ports, 1.0)
        url = facts(gw.state.root, "old")["url"]
        port = int(url.rsplit(":", 1)[1])
        wait_until(lambda: post(url + "/v1/chat/completions", CHAT)[0] == 200, what="served through the gateway")
        assert [c.kind for c in gw.sync("old", [_hp(a_url)], ports, 2.0, share=True)] == ["GatewayReloaded"]
        assert " reuseport" in (prefix_of(gw.state.root, "old") / "nginx.conf").read_text()
        old_pid = master_pid(prefix_of(gw.state.root, "old"))

        kinds = [c.kind for c in gw.sync("new", [_hp(a_url)], ports, 3.0, take_from="old")]
        assert kinds == ["GatewayTakenOver", "GatewayStarted"], kinds
        assert facts(gw.state.root, "new")["url"] == url and facts(gw.state.root, "new")["up"]
        assert master_pid(prefix_of(gw.state.root, "old")) == old_pid  # both listen
        assert ports.lookup("127.0.0.1", "new/gateway", "http") == port
        assert ports.lookup("127.0.0.1", "old/gateway", "http") is None

        # a registry rebuilt from the records (a restart) may give the port to the old name first:
        # stopping the old gateway never frees the port the new name's record holds
        for node in gw.aliases:
            ports.release_key(node, "new/gateway", "http")
            ports.claim(node, "old/gateway", "http", port)
        gw.stop("old", ports)
        assert ports.lookup("127.0.0.1", "new/gateway", "http") == port
        wait_until(lambda: master_pid(prefix_of(gw.state.root, "old")) is None, what="the old master gone")
        assert post(url + "/v1/chat/completions", CHAT)[0] == 200  # the new one serves the address
        assert ports.lookup("127.0.0.1", "new/gateway", "http") == port
        # the rename over (no second master needed): SO_REUSEPORT is dropped from its record and config
        assert [c.kind for c in gw.sync("new", [_hp(a_url)], ports, 4.0)] == ["GatewayReloaded"]
        rec = json.loads(record_path(gw.state.root, "new").read_text())
        assert "reuseport" not in rec and "takenFrom" not in rec
        assert " reuseport" not in (prefix_of(gw.state.root, "new") / "nginx.conf").read_text()
        assert gw.sync("new", [_hp(a_url)], ports, 4.5) == []  # settled: its own from now on
        # ... but a reload keeps the option on the socket the master listens on (nginx only ever adds
        # it; docs/operations.md "Security"): another process of this user can still bind beside it
        # until the master is next started
        assert _binds_beside(port)

        # the same, given up mid-way (renamed back): the new gateway stops, the old one keeps its port
        assert [c.kind for c in gw.sync("new", [_hp(a_url)], ports, 4.8, share=True)] == ["GatewayReloaded"]
        gw.sync("back", [_hp(a_url)], ports, 5.0, take_from="new")
        assert ports.lookup("127.0.0.1", "new/gateway", "http") is None
        gw.stop("back", ports)
        assert ports.lookup("127.0.0.1", "new/gateway", "http") == port
        wait_until(lambda: master_pid(prefix_of(gw.state.root, "back")) is None, what="the abandoned master gone")
        assert post(url + "/v1/chat/completions", CHAT)[0] == 200
        gw.stop("new", ports)
    finally:
        a.stop()


def test_a_renamed_gateway_takes_no_address_it_cannot_bind(tmp_path):
    """The old name's gateway on another host (a standby took over, the host renamed) or in a Slurm
    job: the new one gets an address of its own (the rename goes on without a hand-over), by the
    same test as the rename's step (core/plan/rename.why_not_takeable)."""
    gw = Gateways(StateDir(tmp_path / "state"), host="127.0.0.1", nginx=None)
    ports = _ports()
    for old in ({"host": "elsewhere", "port": ports.base + 7}, {"host": "127.0.0.1", "port": ports.base + 7, "mode": "job"}):
        record_path(gw.state.root, "old").parent.mkdir(parents=True, exist_ok=True)
        record_path(gw.state.root, "old").write_text(json.dumps(old))
        record_path(gw.state.root, "new").unlink(missing_ok=True)
        host, port = gw.address("new", ports, 1.0, take_from="old")
        rec = json.loads(record_path(gw.state.root, "new").read_text())
        assert (host, "takenFrom" in rec, "reuseport" in rec) == ("127.0.0.1", False, False)
        ports.release("new/gateway")
    record_path(gw.state.root, "old").write_text(json.dumps({"host": "127.0.0.1", "port": ports.base + 7}))
    record_path(gw.state.root, "new").unlink()
    assert gw.address("new", ports, 2.0, take_from="old") == ("127.0.0.1", ports.base + 7)  # here: taken


@needs_nginx
def test_orphan_workers_adopted_by_a_subreaper_are_found_too(tmp_path):
    """Under a subreaper (a container's init, a CI runner) the orphaned workers of a killed master
    get the subreaper as their parent, not pid 1: they are orphans all the same (CI showed it)."""
    ports = _ports()
    script = f"""
import json, os, signal, sys, time
sys.path[:0] = {[str(Path(__file__).parent), str(Path(__file__).parent.parent)]!r}
from pathlib import Path
from reconciler.shell.gateway.host import Gateways
from reconciler.shell.gateway.sweep import master_pid, orphan_nginx_workers
from reconciler.shell.gateway.record import prefix_of, record_path
from reconciler.drivers.state import StateDir
from reconciler.core.ports import NodePortAllocator
gw = Gateways(StateDir(Path({str(tmp_path / "state")!r})), host="127.0.0.1")
ports = NodePortAllocator({ports.base}, {ports.limit})
gw.sync("r1", [], ports, 1.0)
rec = json.loads(record_path(gw.state.root, "r1").read_text())
(worker,) = rec["workers"]
os.kill(rec["pid"], signal.SIGKILL)
deadline = time.monotonic() + 20
while master_pid(prefix_of(gw.state.root, "r1")) is not None and time.monotonic() < deadline:
    time.sleep(0.05)
found = orphan_nginx_workers(rec["port"])
parent = int(open(f"/proc/{{worker}}/stat").read().rsplit(")", 1)[1].split()[1])  # before it is told to quit
os.kill(worker, signal.SIGQUIT)
print(json.dumps({{"worker": worker, "found": found, "parent": parent}}))
"""
    out = subprocess.run([sys.executable, str(Path(__file__).parent / "support" / "subreaper.py"),
                          sys.executable, "-c", script], capture_output=True, text=True, timeout=scaled(60))
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["parent"] != 1, seen  # adopted by the subreaper: the case this is about
    assert seen["found"] == [seen["worker"]], seen
