"""Issue 48 item 7 on the real Slurm: a file whose ``name:`` changes is a rename. The new
deployment comes up beside the old one (the mocker's startup_time makes "before Ready" seconds
long), takes the old one's gateway address once Ready, and only then is the old one cancelled, as a
normal delete; a client loop through the gateway sees no failed request and no moved endpoint."""

from __future__ import annotations

import json
import os
import time

import pytest

from harness import Harness
from helpers import wait_until
from support.clients import Client, sending
from support.gateways import _serves

pytestmark = [pytest.mark.slurm, pytest.mark.needs("nginx")]

STARTUP = 5  # seconds the mocker's /health answers 503: the new deployment is seconds from Ready

TEXT = """\
name: {name}
model: {{path: m}}
resources: {{gpus_per_node: 8}}
engine: {{type: mocker, speedup_ratio: 100, startup_time: {startup}}}
roles: {{agg: {{workers: 1, gpus: 1}}}}
frontend: {{type: builtin, args: {{poll-interval: 0.2}}}}
"""


def _status(h: Harness, name: str) -> dict:
    try:
        return json.loads((h.state / name / "status.json").read_text())
    except (OSError, ValueError):
        return {}


@pytest.mark.parametrize("restart", [False, True], ids=["once", "restarted-midway"])
def test_a_renamed_file_hands_the_endpoint_over_without_a_failed_request(tmp_path, restart):
    """``restart``: the reconciler is killed (-9) once the rename is recorded and started again: it
    carries the rename on from state/ (the old one held, the new one's gateway waiting)."""
    h = Harness(tmp_path, "slurm")
    try:
        old, new = h.name("ren-old"), h.name("ren-new")
        f = h.manifests / "app.yaml"
        f.write_text(TEXT.format(name=old, startup=STARTUP))
        h.start()
        g = h.wait_ready(old, timeout=90)
        endpoint = g["endpoint"]
        gw = json.loads((h.state / old / "gateway.json").read_text())
        assert endpoint == f"http://{gw['host']}:{gw['port']}"
        wait_until(lambda: _serves(endpoint), timeout=30, what="a completion through the gateway")
        old_jobs = h.jobs(old)
        assert old_jobs

        with sending(Client(endpoint, limit=100000)) as (c,):
            c.wait_more(20, "requests through the gateway before the rename")
            f.write_text(TEXT.format(name=new, startup=STARTUP))
            renamed = time.monotonic()
            if restart:
                wait_until(lambda: (h.state / "renames.json").exists(), timeout=30, what="the rename recorded")
                h.kill9()
                h.start()
            new_ready = old_gone = None
            reasons: set[str] = set()
            midway = None
            deadline = renamed + 150
            # poll both sides until the old deployment has nothing left in Slurm (bounded)
            while time.monotonic() < deadline:
                now = time.monotonic()
                reasons.add(str(_status(h, old).get("reason")))
                if "BeingReplaced" in reasons and midway is None and new_ready is None:
                    # what an operator sees while the new one comes up (once: `get` plans a pass itself)
                    midway = (h.cli("describe", old).stdout, h.get(new))
                if new_ready is None and _status(h, new).get("phase") == "Ready":
                    new_ready = now - renamed
                if old_gone is None and not h.steps(old):
                    old_gone = now - renamed
                if old_gone is not None and not h.jobs(old):
                    break
                time.sleep(0.2)
            else:
                raise AssertionError(f"the old deployment still runs {time.monotonic() - renamed:.0f} s after "
                                     f"the rename (new Ready at {new_ready}; log:\n{h.log()[-3000:]})")
            sent = c.ok + len(c.failed)
            wait_until(lambda: c.ok + len(c.failed) >= sent + 20, timeout=30,
                       what="requests through the gateway after the old deployment left")
            sent_through = time.monotonic() - renamed
        load = os.getloadavg()
        print(f"\nrename{' (restarted midway)' if restart else ''}: {c.ok + len(c.failed)} requests, {len(c.failed)} failed; new Ready "
              f"{new_ready if new_ready is None else round(new_ready, 1)} s after the edit, the old's steps gone "
              f"{old_gone:.1f} s after it "
              f"(startup_time {STARTUP} s; loop ran {sent_through:.1f} s after the edit; load {load})")
        assert new_ready is not None, "the new deployment was never Ready"
        assert old_gone >= new_ready, f"the old deployment was cancelled {old_gone:.1f} s after the rename, " \
                                      f"before the new one was Ready ({new_ready:.1f} s)"
        assert c.failed == [], f"{len(c.failed)} of {c.ok + len(c.failed)} requests failed: {c.failed[:5]}"
        assert "BeingReplaced" in reasons, reasons
        described, row = midway
        assert f"Rename: BeingReplaced: renamed to {new} in {f}" in described, described
        if row["status"] != "Ready":  # still coming up when asked: it shows the endpoint it takes over
            assert row["reason"] == "Replacing" and row["endpoint"] == endpoint, row
        g = h.get(new)
        assert g["name"] == new and g["status"] == "Ready" and g["endpoint"] == endpoint, g
        assert json.loads((h.state / new / "gateway.json").read_text())["port"] == gw["port"]
        assert not (h.state / old / "gateway.json").exists()
        r = h.cli("get", "-o", "json")
        assert [row["name"] for row in json.loads(r.stdout)] == [new], r.stdout
        assert _serves(endpoint)
    finally:
        h.cleanup()
