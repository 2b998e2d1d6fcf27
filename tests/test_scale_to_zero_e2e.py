"""Scale to zero on the real Slurm, a mocker recipe behind the built-in router and the real gateway
(nginx + its holder): idle, the deployment drains to zero and its allocation is released (squeue
has no job of it); with the reconciler stopped nothing can wake it, so a request held past the
hold timeout gets the 503 JSON with Retry-After; with the reconciler back, requests through the
gateway are held, the worker comes back, and every one of them succeeds, streamed."""

from __future__ import annotations

import json

import pytest

from harness import Harness
from helpers import wait_until
from reconciler.shell.gateway import holder_supervisor
from support.record import events
from support.gateways import Call

pytestmark = pytest.mark.slurm

TEXT = """\
name: {name}
model: {{path: m}}
resources: {{gpus_per_node: 8}}
engine: {{type: mocker, speedup_ratio: 10}}
roles: {{agg: {{workers: 1, gpus: 1}}}}
frontend: {{type: builtin, args: {{poll-interval: 0.2}}}}
reconcile:
  autoscale:
    roles:
      agg: {{min: 0, max: 2, target: {{waiting_per_worker: 4}}}}
    interval_seconds: 2  # with 1 s, a canary retried each tick fits the canary allowance (the bug it found does not show)
    scale_down_after_seconds: 5
    scale_to_zero_after_seconds: 8
    drain_seconds: 1
    hold_timeout_seconds: {hold}
"""


def scaled(h: Harness, name: str, why: str) -> list[dict]:
    return [e for e in events(h, name) if e["kind"] == "Scaled" and e.get("reason") == why]


def test_idle_goes_to_zero_and_a_held_request_brings_it_back(tmp_path):
    h = Harness(tmp_path, "slurm")
    calls: list[Call] = []
    try:
        name = h.name("zero")
        manifest = h.manifests / f"{name}.yaml"
        manifest.write_text(TEXT.format(name=name, hold=3))
        h.start()
        url = h.wait_ready(name, timeout=90)["endpoint"]
        first = Call(url)
        first.run()
        assert first.status == 200 and first.body.rstrip().endswith(b"data: [DONE]"), first.body[-200:]
        assert h.jobs(name), "one allocation while serving"
        # idle: drained, stopped, the allocation released (Slurm's own queue says so)
        wait_until(lambda: h.jobs(name) == [] and h.steps(name) == {}, timeout=120, interval=0.5,
                   what=f"scaled to zero (events: {[e['message'] for e in events(h, name)][-5:]})")
        down = scaled(h, name, "ScaledToZero")
        # once at zero it stays there until a request comes: no wake-up of its own (the frontend's
        # canary during the drain is no demand)
        assert scaled(h, name, "WokeUp") == [], [e["message"] for e in events(h, name) if e["kind"] == "Scaled"]
        assert down and "1 -> 0: no request for" in down[0]["message"], [e["message"] for e in events(h, name)]
        drained = [e for e in events(h, name) if e["kind"] == "Draining" and "agg_0" in e["message"]]
        assert drained, "the worker left the router before it was stopped"
        g = wait_until(lambda: (g := h.get(name))["status"] == "ScaledToZero" and g, timeout=30,
                       what="get shows the deployment at zero")
        assert g["autoscale"]["agg"]["desired"] == 0 and g["autoscale"]["agg"]["current"] == 0, g["autoscale"]
        assert g["endpoint"] == url, "the stable address stays"

        # nothing can wake it (the reconciler is down; the gateway and its holder run on): the
        # held request gets the 503 JSON after the 3 s hold
        assert h.stop() == 0
        late = Call(url)
        late.run()
        assert late.status == 503, (late.status, late.body)
        err = json.loads(late.body)["error"]
        assert err["type"] == "service_unavailable" and "scaled to zero" in err["message"], err
        # the hold is the recipe's 3 s, or the measured startup when that is longer (a request held for
        # less than a wake-up takes could only be refused): what the gateway was last told
        measured = [r["p90"] for r in json.loads((h.state / name / "startup.json").read_text())["summary"].values()
                    if r["lives"]]
        hold = json.loads((h.state / name / "gateway" / "hold.json").read_text())["timeout"]
        assert measured and hold == max(3, round(max(measured), 3)), (hold, measured)
        assert f"hold of {hold:g}s" in err["message"] and int(late.headers["Retry-After"]) >= 1, (err, late.headers)
        assert "expected_wait_seconds" in err and err["reason"], err

        # the reconciler back, with a longer hold (the running holder reads it): requests are held,
        # the deployment wakes up, and every held request is answered from the new worker
        manifest.write_text(TEXT.format(name=name, hold=300))
        h.start()
        prefix = h.state / name / "gateway"
        port = json.loads((h.state / name / "gateway.json").read_text())["holderPort"]
        hold_file = prefix / "hold.json"
        wait_until(lambda: holder_supervisor.running(prefix.absolute()) and hold_file.exists()
                   and json.loads(hold_file.read_text()) == {"timeout": 300} and holder_supervisor.stats(port),
                   timeout=60, what="the holder with the new hold timeout, answering")
        calls += [Call(url, max_tokens=30) for _ in range(3)]
        for c in calls:
            c.start()
        for c in calls:
            c.join(240)
        assert [c.status for c in calls] == [200, 200, 200], [(c.status, c.body[-200:]) for c in calls]
        assert all(c.body.rstrip().endswith(b"data: [DONE]") for c in calls)
        woke = scaled(h, name, "WokeUp")
        assert woke and "0 -> 1" in woke[0]["message"] and "wake-up" in woke[0]["message"], woke
        assert "request(s) held at the gateway" in woke[0]["message"], woke
        assert len(woke) == 1 and len(down) == 1, [e["message"] for e in events(h, name) if e["kind"] == "Scaled"]
        assert "agg_0" in h.steps(name) and h.jobs(name), "the worker and its allocation are back"
        back = [e["message"] for e in events(h, name) if e["kind"] == "LaunchStep"][-2:]
        assert all("restart" not in m for m in back), f"a comeback is a new launch, not a restart: {back}"
        s = holder_supervisor.stats(port)
        assert s["forwarded"] >= 3 and s["held"] == 0, s
    finally:
        for c in calls:
            c.join(5)
        h.cleanup()
