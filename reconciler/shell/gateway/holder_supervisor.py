"""Run each deployment's holder (``gateway/holder.py``) next to its gateway's nginx.

The holder is part of the gateway, not a unit of the desired-state pipeline: units are Slurm steps
(or local processes) on the deployment's allocations, and at zero the deployment has none; the
holder must run on the reconciler's host, exactly while the gateway does, and its port is the
gateway's config. So ``Gateways.sync`` starts it before rendering the config (``ensure``), and
stops it with the gateway.

Like nginx, it outlives the reconciler (its own session): a restarted reconciler adopts the one
whose pid file and command line match; one started with other settings (a new hold timeout)
is replaced. Its port comes from the port registry under the gateway's owner (kept for the
deployment's life) and is kept in ``gateway.json``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from reconciler.core.ports import NodePortAllocator, PortsExhausted
from reconciler.gateway.keys import KeyFile
from reconciler.shell.gateway.bindcheck import bind_free
from reconciler.fsutil import atomic_write_text, open_append

log = structlog.get_logger("reconciler")
MODULE = "reconciler.gateway.holder"
NAME = "holder"  # the port's name under the gateway's owner
START_TIMEOUT_S = 15.0  # aiohttp's import alone takes a second on a busy 2-core login node
RESPAWN_S = 30.0  # a holder gone within this of its start waits this long before the next
_children: list[subprocess.Popen] = []
STOP_WAIT_S = 5.0
DEFAULT_CHECK_HOLD_S = 10.0  # the --timeout of a holder that only checks keys (it is sent nothing to hold)
IDLE_EXIT_S = 1.0  # a stopped holder with nothing held ends within this (its port freed, no drain)


@dataclass
class DoorMemory:
    """What one controller's gateways have read of the keys files and said of each front door.
    Owned by the gateways object, not the module: two controllers in one process each say it."""

    keyfiles: dict[str, KeyFile] = field(default_factory=dict)  # keys file -> its parse (read again when it changes)
    said: dict[str, str] = field(default_factory=dict)  # gateway prefix -> what was last said of its keys file


def argv(python: str, recipe: str, port: int, gateway_port: int, timeout: float, prefix: Path) -> list[str]:
    return [python, "-m", MODULE, "--recipe", recipe, "--port", str(port), "--gateway-port", str(gateway_port),
            "--timeout", f"{timeout:g}", "--prefix", str(prefix)]


def _cmdline(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return raw.rstrip(b"\0").decode(errors="replace").split("\0") if raw else None


def running(prefix: Path) -> tuple[int, list[str]] | None:
    """(pid, argv) of the holder of this gateway (its pid file, checked against the process)."""
    try:
        pid = int((prefix / "holder.pid").read_text().strip())
    except (OSError, ValueError):
        return None
    cmd = _cmdline(pid)
    if not cmd or MODULE not in cmd or str(prefix) not in cmd:
        return None  # gone, a zombie, or a reused pid
    return pid, cmd


def port_of(rec: dict, recipe: str, host_names: set[str], ports: NodePortAllocator, host: str) -> int:
    """The holder's port: allocated once under the gateway's owner, then kept (``rec['holderPort']``)."""
    owner = f"{recipe}/gateway"
    kept = rec.get("holderPort")
    if isinstance(kept, int):
        for n in host_names:
            ports.claim(n, owner, NAME, kept)
        return kept
    for _ in range(64):
        port = ports.allocate(host, owner, NAME)
        if bind_free(port, "127.0.0.1") and all(ports.claim(n, owner, NAME, port) for n in host_names):
            return port
        for n in {host, *host_names}:  # this port only: the gateway's own stays
            ports.release_key(n, owner, NAME)
        ports.block(host, port, time.time() + 3600)  # something else holds it
    raise PortsExhausted(f"no bindable port for the holder of {recipe} on {host}")


def sync(recipe: str, rec: dict, prefix: Path, gateway_port: int, hold: float | None, ports: NodePortAllocator,
         host: str, names: set[str], door: dict | None, memory: DoorMemory) -> tuple[int | None, dict, list[tuple[str, str]]]:
    """The holder as the recipe wants it: (its port for the config, or None: no holder; the gateway
    record's new holder fields; events (kind, message)). ``hold``: the hold timeout, None when
    the recipe holds no request (a holder left from an earlier spec is stopped, unless it must
    check API keys). ``door``: the front door's settings (``front_door``), written for the holder
    before it is started or asked; ``memory``: the caller's record of what was said of it."""
    _reap()
    said_door = write_door(prefix, rec, door, memory) if door is not None else []
    if hold is None and door is not None and door.get("keys"):
        hold = DEFAULT_CHECK_HOLD_S  # it runs to check keys; nginx sends it no request to hold
    if hold is None:
        pid = stop(prefix)
        gone = [("GatewayHolderStopped", f"holder {pid} stopped: the recipe holds no request")] if pid else []
        return None, {"holderPid": None, "holderError": None}, gone
    try:
        port = port_of(rec, recipe, names, ports, host)
    except PortsExhausted as e:  # the gateway still serves its frontends; at zero it answers 503 at once
        why = f"no holder: {e}"
        return None, {"holderError": why}, ([] if rec.get("holderError") == why else [("GatewayFailed", why)])
    pid, did = ensure(prefix, argv(python(), recipe, port, gateway_port, hold, prefix), port)
    said: list[tuple[str, str]] = list(said_door)
    if pid is not None and write_hold(prefix, hold) and did is None:  # read per request: no restart
        said.append(("GatewayHolder", f"holder {pid}: requests now wait up to {hold:g}s for a frontend"))
    fields = {"holderPort": port, "holderPid": pid, "holderError": None if pid else did}
    if pid is None:
        # its port may be taken since (the host's ephemeral range can overlap the port range): the
        # next try takes a fresh one
        fields["holderPort"] = None
        for n in {host, *names}:
            ports.release_key(n, f"{recipe}/gateway", NAME)
        # no holder: the config answers 503 at once (nginx would answer 502 for a dead upstream)
        return None, fields, ([] if rec.get("holderError") == did else [("GatewayFailed", str(did))])
    if did is None:
        return port, fields, said
    return port, fields, said + [("GatewayHolder", f"holder {pid} {did} on 127.0.0.1:{port}: requests wait up to "
                                            f"{hold:g}s while the deployment has no Ready frontend")]


def _reap() -> None:
    _children[:] = [c for c in _children if c.poll() is None]


def _settings(cmd: list[str]) -> list[str]:
    """What a holder must be started again for: all of its argv but the hold timeout, which it reads
    from ``hold.json`` for every request (an edit of it cuts no stream the holder relays)."""
    return [a for i, a in enumerate(cmd) if not (i and cmd[i - 1] == "--timeout")]


def front_door(keys: str | None, max_held: int, max_held_mb: int, tls: tuple[str, str] | None = None) -> dict:
    """What the holder reads from ``door.json``: the keys file (None: open) and its caps; and the
    listener's TLS files (nginx's, the holder ignores them)."""
    return {"keys": keys, "maxHeld": max_held, "maxHeldBytes": max_held_mb * 1024 * 1024,
            "tls": list(tls) if tls else None}


def write_door(prefix: Path, rec: dict, door: dict, memory: DoorMemory) -> list[tuple[str, str]]:
    """``door.json`` says ``door`` (written only when it changes); events: a keys file that cannot
    be used (said once per new error: the gateway then refuses every request, it never opens)."""
    path = prefix / "door.json"
    try:
        now = json.loads(path.read_text())
    except (OSError, ValueError):
        now = None
    if now != door:
        prefix.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps(door))
    said: list[tuple[str, str]] = []
    where = door.get("keys")
    last = memory.said.get(str(prefix))
    if not where and last != "open":
        log.warning("gateway open: no reconcile.gateway.api_keys, anyone who reaches it may call the deployment",
                    recipe=prefix.parent.name)
        memory.said[str(prefix)] = "open"
    if where:
        kf = memory.keyfiles.setdefault(where, KeyFile(Path(where)))
        kf.refresh()  # read again only when the file changed
        if kf.error and last != kf.error:
            said.append(("GatewayFailed", f"reconcile.gateway.api_keys: {kf.error}; every request gets 401 until it is fixed"))
        elif not kf.error and last not in (None, f"{len(kf.keys)} keys"):
            said.append(("GatewayKeys", f"reconcile.gateway.api_keys: {where}: {len(kf.keys)} key(s)"))
        memory.said[str(prefix)] = kf.error or f"{len(kf.keys)} keys"
    return said


def write_hold(prefix: Path, hold: float) -> bool:
    """``hold.json`` says ``hold``; whether it had to be written."""
    path = prefix / "hold.json"
    try:
        if json.loads(path.read_text()).get("timeout") == hold:
            return False
    except (OSError, ValueError, AttributeError):
        pass
    prefix.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps({"timeout": hold}))
    return True


def ensure(prefix: Path, want: list[str], port: int) -> tuple[int | None, str | None]:
    """The holder running with exactly ``want``: (pid, what was done: None, 'started', 'replaced'), or
    (None, an error). It does not wait for the holder to listen (its import takes a second on a
    busy host, and the tick serves every deployment): until it does, nginx finds its port refused
    and answers the JSON 503 it would answer without a holder."""
    found = running(prefix)
    if found is not None and _settings(found[1]) == _settings(want):
        return found[0], None
    did = "started"
    if found is not None:  # other settings: the old one goes first (it holds the port)
        stop(prefix)
        did = "replaced"
    else:
        try:  # one that died soon after its start is not started again at every pass
            since = time.time() - (prefix / "holder.pid").stat().st_mtime
        except OSError:
            since = None
        if since is not None and since < RESPAWN_S and stats(port, timeout=0.2) is None:
            return None, f"the holder exited within {RESPAWN_S:g}s of its start (see {prefix / 'holder.log'})"
    try:  # its log and pid file: private, and never written through a planted symlink
        with open_append(prefix / "holder.log") as out:
            p = subprocess.Popen(want, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                 start_new_session=True, cwd=prefix)
    except OSError as e:
        return None, f"cannot start the holder: {e}"
    atomic_write_text(prefix / "holder.pid", f"{p.pid}\n")
    _children.append(p)  # reaped by the next start (no zombie left for a long-lived reconciler)
    _children[:] = [c for c in _children if c.poll() is None]
    return p.pid, did


def wait_listening(port: int, timeout: float = START_TIMEOUT_S) -> bool:
    """True once the holder on ``port`` answers (tests, and a caller that must not race its start)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if stats(port, timeout=0.5) is not None:
            return True
        time.sleep(0.05)
    return False


def stop(prefix: Path) -> int | None:
    """SIGTERM to this gateway's holder (it lets its port go and drains what it holds: only when the
    gateway goes or it is replaced); waits (bounded) until its port is free, not for the drain."""
    found = running(prefix)
    if found is None:
        return None
    pid = found[0]
    try:
        os.kill(pid, signal.SIGTERM)
    except OSError:
        return None
    deadline = time.monotonic() + STOP_WAIT_S
    cmd = found[1]
    at = cmd.index("--port") + 1 if "--port" in cmd[:-1] else None
    port = int(cmd[at]) if at is not None and cmd[at].isdigit() else None
    mine = next((c for c in _children if c.pid == pid), None)
    if mine is not None:  # our child: reaped, so it leaves no zombie
        try:
            mine.wait(IDLE_EXIT_S)  # one with nothing to drain ends at once
        except subprocess.TimeoutExpired:  # draining (up to gateway/holder.DRAIN_S): reaped once done
            threading.Thread(target=mine.wait, name=f"reap-holder-{pid}", daemon=True).start()
    # it lets its port go at once and drains what it holds and relays: the tick waits for the port only
    while running(prefix) is not None and time.monotonic() < deadline and not (port and bind_free(port, "127.0.0.1")):
        time.sleep(0.05)
    (prefix / "holder.pid").unlink(missing_ok=True)  # stopped on purpose: the next start is not a respawn
    _children[:] = [c for c in _children if c.poll() is None]  # reap it (and any other that ended) now
    return pid


def stats(port: int, timeout: float = 1.0) -> dict | None:
    """The holder's counters (held now, received in all), or None when it does not answer."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/holder/stats", timeout=timeout) as r:
            doc = json.loads(r.read())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def write_wake(prefix: Path, expected_ready_at: float | None, why: str) -> None:
    """What the holder tells a client it turns away: when a frontend is expected, and why."""
    prefix.mkdir(parents=True, exist_ok=True)
    atomic_write_text(prefix / "wake.json", json.dumps({"expectedReadyAt": expected_ready_at, "why": why}))


# what the holder says when no frontend is coming at all (not "one is being started")
SUSPENDED = "the deployment is suspended (reconciler resume, or reconcile.suspend: false): nothing is started"
DELETED = "the deployment's gateway was removed (its recipe deleted, or its frontend)"


def say_nothing_comes(prefix: Path, why: str | None) -> None:
    """``why`` (SUSPENDED, DELETED) in ``wake.json`` with no expected time, written only when it
    changes; None: such a word is taken back (the autoscaler's own, if any, is written again at
    its next decision; until then the holder's default)."""
    path = prefix / "wake.json"
    try:
        now = json.loads(path.read_text()).get("why")
    except (OSError, ValueError, AttributeError):
        now = None
    if why is not None and now != why and prefix.is_dir():
        write_wake(prefix, None, why)
    elif why is None and now in (SUSPENDED, DELETED):
        path.unlink(missing_ok=True)


def quit_holders_under(root: Path) -> list[int]:
    """SIGTERM every holder whose gateway directory is under ``root`` (a test session's teardown;
    the holders also exit by themselves once their directory is gone)."""
    told = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        cmd = _cmdline(int(proc.name))
        under = f"{str(root).rstrip('/')}/"  # not a sibling whose name only begins with root's
        if cmd and MODULE in cmd and any(c.startswith(under) for c in cmd):
            try:
                os.kill(int(proc.name), signal.SIGTERM)
                told.append(int(proc.name))
            except OSError:
                continue
    return told


def python() -> str:
    return sys.executable


def demand(root: Path, recipe: str) -> dict | None:
    """The counters of the recipe's holder (its port from ``gateway.json``), None when it has none
    or it does not answer."""
    try:
        rec = json.loads((root / recipe / "gateway.json").read_text())
        port = rec.get("holderPort")
    except (OSError, ValueError, AttributeError):
        return None
    if rec.get("mode") == "job":  # on its node's loopback, not this host's (never with scale to zero)
        return None
    return stats(port) if isinstance(port, int) else None
