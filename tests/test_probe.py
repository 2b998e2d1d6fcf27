"""The HTTP readiness probe: kept-alive connections, a server that closed one meanwhile, answers
delimited by the connection's end, a hung worker, and the bounded pool — against real sockets."""

from __future__ import annotations

import contextlib
import select
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from reconciler.shell.readiness import probe
from reconciler.world import Unit


class Server:
    """A real HTTP server on loopback that counts the connections it accepted."""

    def __init__(self, protocol: str = "HTTP/1.1", close_after: bool = False, status: int = 200, delay: float = 0.0):
        outer = self
        self.connections = 0
        self.in_flight = self.most_in_flight = 0
        lock = threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            protocol_version = protocol

            def setup(self):
                outer.connections += 1
                super().setup()

            def do_GET(self):
                with lock:
                    outer.in_flight += 1
                    outer.most_in_flight = max(outer.most_in_flight, outer.in_flight)
                time.sleep(delay)  # a slow /health: probes overlap
                with lock:
                    outer.in_flight -= 1
                body = b'{"status": "ok"}'
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                if close_after:  # an idle timeout, without saying so in the answer
                    self.close_connection = True

            def log_message(self, *a):
                pass

        ThreadingHTTPServer.request_queue_size = 128  # all the probes may connect at once
        self.srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.srv.daemon_threads = True
        self.port = self.srv.server_address[1]
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def close(self):
        self.srv.shutdown()
        self.srv.server_close()


MEM = probe.ProbeMemory()  # these tests' probes remember here (in the loop: the controller's own)


@pytest.fixture(autouse=True)
def fresh_pool():
    MEM.conns.forget_all_but(set())
    yield
    MEM.conns.forget_all_but(set())


def test_a_kept_alive_connection_is_reused_across_probes():
    s = Server()
    try:
        assert all(probe.probe_one("127.0.0.1", s.port, "/health", conns=MEM.conns) for _ in range(3))
        assert s.connections == 1
    finally:
        s.close()


def test_a_connection_the_server_closed_while_idle_is_retried_once_on_a_fresh_one():
    s = Server(close_after=True)
    try:
        assert probe.probe_one("127.0.0.1", s.port, "/health", conns=MEM.conns)
        # closed by the server as it answered: whether or not that reached us yet, the probe holds
        assert probe.probe_one("127.0.0.1", s.port, "/health", conns=MEM.conns)
        assert s.connections == 2
    finally:
        s.close()


def test_an_answer_delimited_by_the_end_of_the_connection_is_read():
    s = Server(protocol="HTTP/1.0", status=503)
    try:
        assert probe._get("127.0.0.1", s.port, "/health", 1.0, MEM.conns) == (503, b'{"status": "ok"}')
        assert not MEM.conns.idle  # HTTP/1.0: nothing to keep
    finally:
        s.close()


def test_a_worker_that_accepts_and_never_answers_is_not_ready_after_the_timeout():
    lst = socket.socket()
    lst.bind(("127.0.0.1", 0))
    lst.listen(8)
    try:
        t0 = time.monotonic()
        assert probe.probe_one("127.0.0.1", lst.getsockname()[1], "/health", timeout=0.3, conns=MEM.conns) is False
        assert time.monotonic() - t0 < 2.0
    finally:
        lst.close()


def test_many_units_are_probed_by_the_bounded_pool_and_gone_endpoints_are_let_go():
    s = Server(delay=0.05)
    refused = socket.socket()
    refused.bind(("127.0.0.1", 0))
    dead = refused.getsockname()[1]
    refused.close()  # nothing listens there
    try:
        def unit(i: int, port: int) -> Unit:
            return Unit(recipe="r", role="agg", index=i, ordinals=(0,), nodes=("127.0.0.1",), gpus=(),
                        ports={"http": port}, launches=(), container=None, health_port=port, spec_hash="x")

        units = [unit(i, s.port) for i in range(20)] + [unit(99, dead)]
        got = probe.probe_units(units, memory=MEM)
        assert got == {**{u.key: True for u in units[:20]}, units[-1].key: False}
        assert 1 < s.most_in_flight <= probe.CONCURRENCY  # concurrent, and bounded
        probe.probe_units([], memory=MEM)
        assert not MEM.conns.idle  # nothing probed any more: nothing kept
    finally:
        s.close()


class RawServer:
    """Answers each connection with ``reply(conn)`` from a thread: for odd servers."""

    def __init__(self, reply):
        self.lst = socket.socket()
        self.lst.bind(("127.0.0.1", 0))
        self.lst.listen(16)
        self.port = self.lst.getsockname()[1]
        self.connections = 0

        def serve():
            while True:
                try:
                    conn, _ = self.lst.accept()
                except OSError:
                    return
                self.connections += 1
                threading.Thread(target=reply, args=(conn,), daemon=True).start()

        threading.Thread(target=serve, daemon=True).start()

    def close(self):
        self.lst.close()


@contextlib.contextmanager
def raw_server(reply):
    s = RawServer(reply)
    try:
        yield s
    finally:
        s.close()


def test_a_server_that_trickles_its_answer_is_cut_at_the_deadline():
    def trickle(conn):
        conn.recv(4096)
        conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        try:
            for _ in range(400):
                conn.sendall(b"1\r\nx\r\n")
                time.sleep(0.01)
        except OSError:
            pass
        conn.close()

    with raw_server(trickle) as s:
        t0 = time.monotonic()
        assert probe.probe_one("127.0.0.1", s.port, "/health", timeout=0.5, conns=MEM.conns) is False
        assert time.monotonic() - t0 < 1.5


def test_a_lax_server_bare_lf_and_both_framings_still_answers_ready():
    def lax(conn):
        conn.recv(4096)
        conn.sendall(b"HTTP/1.1 200 OK\nContent-Length: 2\nConnection: close\n\nok")
        conn.close()

    with raw_server(lax) as s:
        assert probe.probe_one("127.0.0.1", s.port, "/health", conns=MEM.conns)


def test_a_connection_the_server_spoke_on_while_idle_is_not_read_as_the_answer():
    def answer_then_408(conn):
        conn.recv(4096)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        time.sleep(0.05)
        conn.sendall(b"HTTP/1.1 408 Request Timeout\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        conn.close()

    with raw_server(answer_then_408) as s:
        assert probe.probe_one("127.0.0.1", s.port, "/health", conns=MEM.conns)
        kept = MEM.conns.idle[("127.0.0.1", s.port)][0]
        select.select([kept], [], [], 5)  # the 408 has arrived on the idle connection
        assert probe.probe_one("127.0.0.1", s.port, "/health", conns=MEM.conns)  # a fresh connection, not the 408
        assert s.connections == 2


def test_a_kept_connection_is_renewed_so_a_listener_that_stopped_accepting_is_seen(monkeypatch):
    s = Server()
    try:
        assert probe.probe_one("127.0.0.1", s.port, "/health", conns=MEM.conns)
        monkeypatch.setattr(probe, "REUSE_SECONDS", 0.0)
        s.srv.socket.close()  # the listener is gone; the kept connection would still answer
        assert probe.probe_one("127.0.0.1", s.port, "/health", conns=MEM.conns) is False
    finally:
        s.srv.shutdown()
