"""The gateway is found again after its state is removed (issue 48, item 7).

An operator or a cleanup script removes a deployment's gateway state — ``state/<recipe>/gateway/``
(nginx's config, pid file, logs, the holder's files), ``state/<recipe>/gateway.json`` (its port)
and ``state/ports.json`` — while the nginx master it started goes on serving. The reconciler, the
running one and one started afterwards, finds that master again by the prefix in its command line,
keeps its port (the endpoint), rewrites what it needs and starts no second nginx. A client loop
runs through every removal: no request fails.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from benchmarks.traffic import Traffic
from helpers import wait_until
from load import scaled
from reconciler.shell.gateway.record import prefix_of
from reconciler.shell.gateway.sweep import listeners, master_pid
from support.clusters import slurm_h  # noqa: F401 - the fixture h: a harness on the real Slurm
from support.gateways import _serves
from support.recipes import GATEWAYED as RECIPE
from support.record import events

pytestmark = [pytest.mark.slurm, pytest.mark.needs("nginx")]


def masters(prefix: Path) -> list[int]:
    """Every nginx master running with this prefix (a fork not yet renamed is its master's)."""
    found: dict[int, int] = {}
    for proc in Path("/proc").iterdir():
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if proc.name.isdigit() and cmd.startswith("nginx: master process") and f"-p {prefix}/" in cmd:
                found[int(proc.name)] = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
    return sorted(pid for pid, parent in found.items() if parent not in found)


def nginx_masters_on(port: int) -> set[int]:
    """The nginx masters among the processes listening on ``port``."""
    return {pid for pid, cmd in listeners(port).items() if cmd.startswith("nginx: master process")}


def remove(path: Path) -> None:
    """``rm -rf``: the running reconciler (the holder) may write a file into it meanwhile; again then."""
    for _ in range(50):
        try:
            shutil.rmtree(path)
            return
        except FileNotFoundError:
            return
        except OSError:  # "Directory not empty": a file written in it while it was emptied
            time.sleep(0.05)
    raise AssertionError(f"{path} could not be removed")


def passes(h, n: int) -> None:
    """``n`` more passes of the running reconciler, counted from the end of the one in progress."""
    wait_until(lambda: h.ticks() > 0, timeout=scaled(60), what="the reconciler's first pass")
    first = h.ticks()
    wait_until(lambda: h.ticks() >= first + 1 + n, timeout=scaled(60), what=f"{n} more passes")


def test_the_gateway_is_found_again_after_its_state_is_removed(h):
    name = h.name("gwre")
    (h.manifests / f"{name}.yaml").write_text(RECIPE.format(name=name))
    h.start()
    endpoint = h.wait_ready(name)["endpoint"]
    wait_until(lambda: _serves(endpoint), timeout=20, what="a completion through the gateway")
    prefix = prefix_of(h.state, name)
    record = h.state / name / "gateway.json"
    port = json.loads(record.read_text())["port"]
    pid = master_pid(prefix)
    assert pid is not None and masters(prefix) == [pid]

    def same_gateway(stage: str) -> None:
        """The same master serves the same endpoint, alone, and its state is written again."""
        passes(h, 3)
        assert masters(prefix) == [pid], (stage, masters(prefix), h.log()[-3000:])
        assert nginx_masters_on(port) == {pid}, (stage, nginx_masters_on(port))
        assert json.loads(record.read_text())["port"] == port, stage
        assert master_pid(prefix) == pid and (prefix / "nginx.conf").exists(), stage
        assert (prefix / "nginx.pid").read_text().strip() == str(pid), stage
        wait_until(lambda: h.get(name)["status"] == "Ready", timeout=scaled(30), what=f"{stage}: Ready")
        assert h.get(name)["endpoint"] == endpoint, stage

    traffic = Traffic(endpoint, timeout=30).start()
    try:
        assert traffic.wait_ok(time.monotonic(), 20) is not None
        # 1. its directory (config, pid file, logs, the holder's files) under the running reconciler
        remove(prefix)
        same_gateway("directory removed")
        # 2. the directory and its record (its port) under the running reconciler
        remove(prefix)
        record.unlink()
        same_gateway("directory and record removed")
        # 3. all of it and the port registry, the reconciler stopped meanwhile and started again
        h.kill9()
        remove(prefix)
        record.unlink()
        (h.state / "ports.json").unlink()
        h.start()
        same_gateway("all removed, reconciler restarted")
        assert traffic.wait_ok(time.monotonic(), 20) is not None
    finally:
        traffic.stop()
    failed = traffic.failed()
    assert traffic.sent() > 20 and not failed, (traffic.sent(), [(o.code, o.detail[:120]) for o in failed[:5]])
    assert len(events(h, name, "GatewayStarted")) == 1 and not events(h, name, "GatewayRestarted")
    found = events(h, name, "GatewayFound")
    assert len(found) >= 3, found  # each removal said (a warning and an event), not mended silently
    print(f"\n{traffic.sent()} requests through {endpoint}, 0 failed; " + "; ".join(e["message"] for e in found))
