"""Run, reload and restart each deployment's gateway: our own nginx master, on the reconciler's host.

The gateway is not a Slurm step: it runs next to the reconciler (the login node), so a Slurm
controller restart, a hand-over or a frontend moving never touch it. Its address is allocated
once per deployment from the reconciler's port range and kept in ``state/<recipe>/gateway.json``:
a restarted reconciler (or a lost port registry) finds the same host:port and adopts the master
that still runs (nginx daemonizes; its pid file is under ``state/<recipe>/gateway/``).

Each tick (``sync``): the config is rendered from the Ready frontends; a change is written and
the master gets SIGHUP (graceful: in-flight requests finish on the old workers). A master that
is gone is started again: the first time at once, then with a doubling backoff capped short
(a gateway is stateless). A watcher thread per master wakes the loop the moment it exits
(pidfd), so a dead gateway does not wait for the next resync.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import structlog

from reconciler.fsutil import atomic_write_text
from reconciler.gateway import ANY, GatewayConfig, render
from reconciler.recipe.gateway import bind_error
from reconciler.core.plan.gateway import backoff_after, restart_delay
from reconciler.core.ports import NodePortAllocator, PortsExhausted
from reconciler.drivers.exits import ExitWatch
from reconciler.drivers.state import StateDir
from reconciler.shell.gateway import holder_supervisor, refind, takeover
from reconciler.shell.gateway.bindcheck import bind_free
from reconciler.shell.gateway.confine import nginx_user, unsafe_prefix
from reconciler.shell.gateway.job import GatewayJobs, Placement
from reconciler.shell.gateway.local import gateway_host, nginx_binary, stop_orphans, workers_of
from reconciler.shell.gateway.record import (
    OWNER_NAME, Change, Records, health_page, in_job, prefix_of, record_path,
)
from reconciler.shell.gateway.sweep import end_master, held_by, master_pid, nginx_masters

log = structlog.get_logger("reconciler")
STALE_DUE_S = 2.0
START_TIMEOUT_S = 10.0
CONFIRM_TIMEOUT_S = 2.0
RETIRE_WAIT_S = 1.0


class Gateways(Records):
    """The gateways of every deployment this reconciler runs (one nginx master each)."""

    def __init__(self, state: StateDir, host: str | None = None, nginx: str | None = None,
                 wake: Callable[[], None] | None = None):
        self.state = state
        self.host = host or gateway_host()
        self.aliases = {self.host, "localhost", "127.0.0.1", socket.getfqdn(), gateway_host()}
        self.nginx = nginx or nginx_binary()
        self.wake = wake  # the loop's wake-up: a master that exits is noticed at once
        self._watched: dict[str, int] = {}
        self._conf: dict[str, str] = {}  # recipe -> the config text last written and served
        self._exits = ExitWatch()
        self._exits.wake = wake
        self._lock = threading.Lock()
        self.door_memory = holder_supervisor.DoorMemory()
        self.jobs: GatewayJobs | None = None  # gateways in their own Slurm job (the loop sets it)
        self._masters: tuple[float, dict[int, str]] | None = None  # (pass, this host's nginx masters)

    # ---------------------------------------------------------------- address
    def address(self, recipe: str, ports: NodePortAllocator, now: float,
                take_from: str | None = None) -> tuple[str, int]:
        """The deployment's host:port: allocated the first time, the same ever after. The port is
        held under every name this host goes by (the local driver's units run on "localhost"),
        so no unit is ever given it. ``take_from``: a renamed deployment's old name (core/plan/
        rename.py): its first address is the old one's, whose master still listens there, when
        it can be taken (takeover.py; else one of its own, as for any new deployment)."""
        rec = self._record(recipe)
        owner = f"{recipe}/{OWNER_NAME}"
        if isinstance(rec.get("port"), int) and rec.get("host"):
            for node in {rec["host"], *self.aliases}:  # a registry rebuilt from scratch learns it
                ports.claim(node, owner, "http", rec["port"])
            return rec["host"], rec["port"]
        if take_from and (got := takeover.take(self, recipe, rec, take_from, ports, now, self.host,
                                               self.aliases)) is not None:
            return got
        for _ in range(64):
            port = ports.allocate(self.host, owner, "http")
            if bind_free(port) and all(ports.claim(n, owner, "http", port) for n in self.aliases):
                break
            for n in {self.host, *self.aliases}:
                ports.release_node_owner(n, owner)
            ports.block(self.host, port, now + 3600)  # something else holds it
        else:
            raise PortsExhausted(f"no bindable port for the gateway of {recipe} on {self.host}")
        self._write(recipe, {**rec, "host": self.host, "port": port, "allocatedAt": now})
        return self.host, port

    # ---------------------------------------------------------------- each tick
    def sync(self, recipe: str, upstreams: list[str], ports: NodePortAllocator, now: float,
             unproven: bool = False, hold: float | None = None, listen: str | None = None,
             place: Placement | None = None, door: dict | None = None, take_from: str | None = None,
             share: bool = False) -> list[Change]:
        """Make the gateway run with exactly these upstreams (host:port of Ready frontends; with
        ``unproven``, where the frontends are relaunched, none of them alive now). ``hold``: the
        holder's timeout (shell/gateway/holder_supervisor.py; None: no holder). ``listen``: the address nginx binds
        (reconcile.gateway.listen; None: as recorded). ``place``: in its own Slurm job there
        (reconcile.gateway.allocation; shell/gateway/job.py) instead of here. ``door``: API keys
        and the holder's caps (holder_supervisor.front_door; None: open, default caps). A rename
        (core/plan/rename.py): ``take_from``, the old name whose address this gateway takes;
        ``share``: this (old) gateway's port may be bound beside it (SO_REUSEPORT, kept once set)."""
        rec = self._record(recipe)
        if place is not None or in_job(rec):
            changes: list[Change] = []
            if isinstance(rec.get("port"), int) and (not in_job(rec) or place is None or rec.get("host") != place.node):
                changes = self.stop(recipe, ports)  # it moves: the old one stops, the new one gets an address
                if record_path(self.state.root, recipe).exists():
                    return changes  # the old one not stopped yet: tried again next pass
                changes = [Change("GatewayMoved", c.recipe, c.message) for c in changes]
                holder_supervisor.say_nothing_comes(prefix_of(self.state.root, recipe), None)  # not deleted: moved
            if place is None:
                return changes + self._sync_here(recipe, upstreams, ports, now, unproven, hold, listen, door,
                                                 take_from, share)
            if self.jobs is None:
                return changes + self._failed(recipe, "reconcile.gateway.allocation: this reconciler runs "
                                                         "no Slurm gateway jobs")
            return changes + self.jobs.sync(recipe, upstreams, ports, now, place, unproven=unproven, hold=hold,
                                            door=door)
        return self._sync_here(recipe, upstreams, ports, now, unproven, hold, listen, door, take_from, share)

    def _sync_here(self, recipe: str, upstreams: list[str], ports: NodePortAllocator, now: float,
                   unproven: bool, hold: float | None, listen: str | None,
                   door: dict | None = None, take_from: str | None = None, share: bool = False) -> list[Change]:
        """The gateway as this host's own nginx master."""
        if self.nginx is None:
            return self._failed(recipe, "nginx is not installed (apt-get install nginx-light); "
                                           "the endpoint is the frontend's own address")
        prefix = prefix_of(self.state.root, recipe)
        conf = prefix / "nginx.conf"
        # its state removed under a master that still serves: found again before an address is
        # taken, or a new port and a second master would move the endpoint (refind.py)
        found = refind.again(self, recipe, prefix, ports, now)[1] if refind.lost(self._record(recipe), conf) else []
        host, port = self.address(recipe, ports, now, take_from)
        rec = takeover.shared(self, recipe, self._record(recipe), share)
        # a renamed deployment's first start beside the old name's master, which listens on the port
        beside = bool(rec.get("takenFrom")) and rec.get("startedAt") is None
        listen = listen or rec.get("listen") or ANY  # the record says what nginx binds now
        held, fields, said = holder_supervisor.sync(recipe, rec, prefix, port, hold, ports, self.host,
                                                    {self.host, *self.aliases}, door, self.door_memory)
        keys = bool(door and door.get("keys"))
        if keys and held is None:  # never open what the recipe closes: the running config stays
            return [Change(k, recipe, m) for k, m in said] + self._failed(
                recipe, "reconcile.gateway.api_keys: no holder to check the keys: " + str(fields.get("holderError")))
        if any(rec.get(k) != v for k, v in fields.items()):
            self._write(recipe, rec := {**rec, **fields})
        changes = found + [Change(kind, recipe, msg) for kind, msg in said]
        if rec.get("listen", ANY) != listen and (err := bind_error(listen)):
            # not an address of this host: the gateway goes on where it listens now (its upstreams
            # still follow the frontends), and says why once
            why = f"reconcile.gateway.listen: {err}; the gateway keeps listening on {rec.get('listen', ANY)}:{port}"
            if rec.get("listenError") != why:
                log.error("gateway failed", recipe=recipe, error=why)
                changes.append(Change("GatewayFailed", recipe, why))
                self._write(recipe, rec := {**rec, "listenError": why})
            listen = rec.get("listen", ANY)
        elif rec.get("listenError"):
            self._write(recipe, rec := {**rec, "listenError": None})
        tls = tuple(door["tls"]) if door and door.get("tls") else None
        if bool(rec.get("tls")) != bool(tls):  # the endpoint's scheme (record.facts)
            self._write(recipe, rec := {**rec, "tls": bool(tls)})
        text = render(GatewayConfig(recipe, port, prefix, tuple(sorted(upstreams)), unproven, listen,
                                    held if hold is not None else None, held if keys else None, user=nginx_user(),
                                    tls=tls, loopback_health=True, reuseport=bool(rec.get("reuseport"))))
        pid = master_pid(prefix)
        moved = pid is not None and rec.get("listen", ANY) != listen  # asked for: not a restart
        if moved:  # a reload cannot bind the port anew
            end_master(pid, port)  # its listeners closed: what it carries finishes beside the new one
            (prefix / "nginx.pid").unlink(missing_ok=True)  # the new master's is the one read from now on
            self._write(recipe, rec := {**rec, "pid": None, "exitedAt": now, "notBefore": None, "backoff": 0})
            pid = master_pid(prefix)
        if pid is not None:
            return self._serve_running(recipe, pid, rec, text, conf, upstreams, unproven, port, now, changes)
        return self._start_master(recipe, rec, text, conf, port, host, listen, upstreams, unproven, moved, beside,
                                  ports, now, changes)

    def _serve_running(self, recipe: str, pid: int, rec: dict, text: str, conf: Path, upstreams: list[str],
                       unproven: bool, port: int, now: float, changes: list[Change]) -> list[Change]:
        """A running master: reloaded when its config text changed or was not confirmed."""
        prefix = conf.parent
        self._watch(recipe, pid)
        served = sorted(upstreams)
        # the text this process last wrote and nginx took (kept: not read back every tick); after
        # a restart of the reconciler, the file; none when the file was removed under the master
        # (refind.py): written again by a reload, which recreates its temp and log paths too
        previous = (self._conf.get(recipe) or conf.read_text()) if conf.exists() else None
        # a reload is due when the text changed, or when the last one was not confirmed: the
        # record holds what nginx was confirmed to serve, never what was only asked of it
        if (previous != text or rec.get("upstreams") != served or bool(rec.get("unproven")) != unproven
                or rec.get("lastError")):
            if (unsafe := unsafe_prefix(prefix, self.state.root)) is not None:
                return self._failed(recipe, unsafe)
            atomic_write_text(conf, text)
            err = self._run(["-t", "-q"], prefix)
            if err is not None:
                if previous is not None:  # the running master's file stays what it serves
                    atomic_write_text(conf, previous)
                return self._failed(recipe, f"config test failed: {err}")
            old = workers_of(pid)
            os.kill(pid, signal.SIGHUP)  # graceful: old workers finish what they carry
            if not self._confirm(port, served, unproven):
                return self._failed(recipe, "the reload was not confirmed by /gateway/health in time; "
                                               "retried next pass")
            self._await_gone(pid, old)
            self._conf[recipe] = text
            how = " (none alive: where the frontends are relaunched)" if unproven else ""
            changes.append(Change("GatewayReloaded", recipe, f"upstreams now {', '.join(served) or 'none'}{how}"))
        # its workers change only with a reload or a start: asked of /proc then, not every tick
        workers = (workers_of(pid) or rec.get("workers", [])) if changes or rec.get("pid") != pid \
            else rec.get("workers", [])
        up = {**rec, "upstreams": served, "unproven": unproven, "pid": pid, "lastError": None,
              "workers": workers}
        if rec.get("backoff") and rec.get("startedAt") is not None:  # stayed up: the next failure restarts at once
            up["backoff"] = backoff_after(rec["backoff"], now - rec["startedAt"])
        if up != rec:
            self._write(recipe, up)
        return changes

    def _start_master(self, recipe: str, rec: dict, text: str, conf: Path, port: int, host: str, listen: str,
                      upstreams: list[str], unproven: bool, moved: bool, beside: bool, ports: NodePortAllocator,
                      now: float, changes: list[Change]) -> list[Change]:
        """No master runs: start (first time), or restart after the backoff the last exits earned."""
        prefix = conf.parent
        backoff = int(rec.get("backoff", 0) or 0)
        if rec.get("pid") is not None and rec.get("exitedAt") is None:
            # noticed now (a daemon leaves no exit record; the pidfd watcher wakes the loop at once)
            rec = {**rec, "exitedAt": now, "pid": None, "notBefore": now + restart_delay(backoff)}
            self._write(recipe, rec)
        if rec.get("notBefore") and now < rec["notBefore"]:
            return []
        if not beside:
            stop_orphans(list(rec.get("workers") or []), port)
        if not beside and not bind_free(port):  # ours after all (its pid lost)? then served as running from the next pass
            kept, said = refind.again(self, recipe, prefix, ports, now)
            if kept:
                return changes + said
            changes += said  # a master that could not be adopted is ended: the port is free for the start
        # held by something not ours: said at once, without nginx's own bind retries (5 x 0.5 s,
        # a stalled tick each time); the endpoint is promised stable, so the port is not changed
        err = unsafe_prefix(prefix, self.state.root) or (None if beside or bind_free(port) else (
            f"port {port} is held by another process ({held_by(port)}); the endpoint keeps its address, so the gateway waits "
            f"for the port (free it, or remove {record_path(self.state.root, recipe)} to take a new one)"))
        self._conf.pop(recipe, None)
        if err is None:
            atomic_write_text(conf, text)
            err = self._run([], prefix)
        pid = self._await_pid(prefix) if err is None else None
        if pid is not None:
            self._conf[recipe] = text
        restarting = rec.get("startedAt") is not None and not moved
        if pid is None:
            delay = restart_delay(backoff + 1)
            self._write(recipe, {**rec, "backoff": backoff + 1, "notBefore": now + delay,
                                 "lastError": err or "started but wrote no pid file"})
            return changes + [Change("GatewayFailed", recipe, f"nginx did not start on {host}:{port}: {err}; "
                           f"next try in {delay:g}s")]
        self._write(recipe, {**rec, "pid": pid, "startedAt": now, "exitedAt": None, "lastError": None,
                             "listen": listen,
                             "answering": None, "probeFailures": 0,
                             "workers": self._await_workers(pid),
                             "upstreams": sorted(upstreams), "unproven": unproven,
                             "restarts": int(rec.get("restarts", 0) or 0) + int(restarting),
                             "backoff": backoff + int(restarting), "notBefore": None})
        self._watch(recipe, pid)
        kind = "GatewayMoved" if moved else "GatewayRestarted" if restarting else "GatewayStarted"
        if beside:
            changes.append(Change("GatewayTakenOver", recipe, f"{host}:{port} taken over from the gateway of "
                                  f"{rec['takenFrom']} (renamed): both listen until it stops"))
        at = host if listen in (ANY, "[::]") else listen
        return changes + [Change(kind, recipe, f"nginx master {pid} serves http://{at}:{port}"
                                 + (f" (reconcile.gateway.listen: {listen})" if moved else "") + " -> "
                                 f"{', '.join(sorted(upstreams)) or 'no Ready frontend (503)'}")]

    def next_due(self, now: float) -> float | None:
        """Seconds until a gateway waiting out its restart backoff may start: when the loop looks again."""
        # a time well past is one no pass acted on (its recipe suspended, held, or failing before
        # its gateway): not a reason to look again at once, over and over
        due = [nb for r in self.known() if (nb := self._record(r).get("notBefore")) and nb >= now - STALE_DUE_S]
        return max(0.0, min(due) - now) if due else None

    def stop(self, recipe: str, ports: NodePortAllocator) -> list[Change]:
        """The recipe is gone: graceful stop (SIGQUIT: requests in flight finish), port released."""
        if in_job(self._record(recipe)) and self.jobs is not None:
            return self.jobs.stop(recipe, ports)
        self._conf.pop(recipe, None)
        pid = master_pid(prefix_of(self.state.root, recipe))
        if pid is not None:
            try:
                os.kill(pid, signal.SIGQUIT)
            except ProcessLookupError:
                pass
        holder_supervisor.say_nothing_comes(prefix_of(self.state.root, recipe), holder_supervisor.DELETED)  # what it still holds hears why
        holder_supervisor.stop(prefix_of(self.state.root, recipe))
        ports.release(f"{recipe}/{OWNER_NAME}")
        # a rename's other gateway on the same address (given up mid-hand-over; or retiring the old
        # name's while the new one serves there) keeps the port
        takeover.keep_shared(self, recipe, self._record(recipe), ports, self.aliases)
        path = record_path(self.state.root, recipe)
        if not path.exists():
            return []
        path.unlink()
        return [Change("GatewayStopped", recipe, "recipe deleted: the gateway stops once its requests finish")]

    def known(self) -> list[str]:
        """Recipes that have a gateway record."""
        return sorted(p.parent.name for p in self.state.root.glob("*/gateway.json"))

    def nginx_masters(self, now: float) -> dict[int, str]:
        """This host's nginx masters, scanned once per pass (refind.py looks for lost ones)."""
        if self._masters is None or self._masters[0] != now:
            self._masters = (now, nginx_masters())
        return self._masters[1]

    # ---------------------------------------------------------------- helpers
    def _run(self, extra: list[str], prefix: Path) -> str | None:
        """nginx with our prefix and config (argv list); None on success, else its error output."""
        argv = [self.nginx or "nginx", "-p", f"{prefix}/", "-c", str(prefix / "nginx.conf"),
                "-e", str(prefix / "error.log"), *extra]
        try:
            r = subprocess.run(argv, capture_output=True, text=True, timeout=START_TIMEOUT_S,
                               start_new_session=True, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as e:
            return f"{type(e).__name__}: {e}"
        if r.returncode != 0:
            return (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1]
        return None

    @staticmethod
    def _await_pid(prefix: Path) -> int | None:
        """The launcher exits once the master has forked; the master writes its pid file a moment later."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            pid = master_pid(prefix)
            if pid is not None:
                return pid
            time.sleep(0.01)
        return None

    @staticmethod
    def _await_workers(pid: int) -> list[int]:
        deadline = time.monotonic() + 2.0
        while not (found := workers_of(pid)) and time.monotonic() < deadline:
            time.sleep(0.01)
        return found

    @staticmethod
    def _await_gone(pid: int, old: list[int]) -> None:
        """An old worker keeps accepting until it has read its QUIT: on a busy host that is tens of
        ms in which it still answers with the old upstreams. Wait (bounded) for the idle ones to
        exit; one still carrying a stream has stopped accepting by then."""
        deadline = time.monotonic() + RETIRE_WAIT_S
        while set(old) & set(workers_of(pid)) and time.monotonic() < deadline:
            time.sleep(0.01)

    def _confirm(self, port: int, upstreams: list[str], unproven: bool) -> bool:
        """A reload is asynchronous: wait (bounded) until the gateway answers with the new upstreams,
        so that what the reconciler reports is what nginx does."""
        want = {"upstreams": upstreams, "unproven": unproven}
        deadline = time.monotonic() + CONFIRM_TIMEOUT_S
        while time.monotonic() < deadline:
            got = health_page("127.0.0.1", port, 1.0)
            if got is not None and {k: got.get(k) for k in want} == want:
                return True
            time.sleep(0.01)
        log.warning("gateway reload not confirmed in time", port=port)
        return False

    def _watch(self, recipe: str, pid: int) -> None:
        """Wake the loop when this master exits: one watcher thread for every master (a thread
        each, blocked in select(), died with ValueError past descriptor 1023: tick.py's 1,000
        gateways)."""
        if self.wake is None:
            return
        with self._lock:
            if self._watched.get(recipe) == pid:
                return
            self._watched[recipe] = pid

        def ended() -> None:
            with self._lock:
                if self._watched.get(recipe) == pid:
                    del self._watched[recipe]

        self._exits.watch(pid, ended)


