"""The service stays up: srtctl's own Dynamo mocker recipe on the real Slurm with the real etcd and
Dynamo 1.6.1, a client loop through the gateway, and etcd killed. Its dependents (the worker and
the frontend read ETCD_ENDPOINTS) are relaunched as soon as etcd's new life is Ready, and the
recipe says NotReady, with the reason, while requests fail."""

from __future__ import annotations

import json
import threading
import time

import pytest

from benchmarks.traffic import Traffic
from helpers import wait_until
from harness import scancel
from support.clients import served
from support.stacks import copy_recipe, stack, stack_tools, tiny_model  # noqa: F401 - fixtures among them

pytestmark = [pytest.mark.slurm, pytest.mark.needs("nginx")]


class Watch(threading.Thread):
    """The status `run` records (what `get` prints: state/<name>/status.json), read every 50 ms —
    `get` itself takes seconds on a loaded machine and would step over a NotReady stretch that is
    now shorter than that: every status seen, with its Ready condition's reason."""

    def __init__(self, h, name: str):
        super().__init__(daemon=True)
        self.h, self.name, self.seen, self.stop = h, name, [], threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.05):
            try:
                st = json.loads((self.h.state / self.name / "status.json").read_text())
            except (OSError, ValueError):
                continue
            ready = next((c for c in st.get("conditions", []) if c["type"] == "Ready"), {})
            self.seen.append((time.monotonic(), st.get("phase"), ready.get("reason"), ready.get("message")))


DETECT = 5.0  # s: a pass (--resync 1 at most apart) and its probes, on a loaded host
LATE = 1.0  # s: one 50 ms sample step and a failed request's answer on its way back


def _not_ready_stretches(seen: list) -> list[tuple[float, float]]:
    """(from, to) of each run of samples not Ready: from the last Ready sample before it (the status
    changed after that one) to its first Ready sample after (or its own last sample)."""
    out, start, last_ready = [], None, None
    for t, phase, _, _ in seen:
        if phase == "Ready":
            if start is not None:
                out.append((start, t))
                start = None
            last_ready = t
        elif start is None:
            start = last_ready if last_ready is not None else t
    if start is not None:
        out.append((start, seen[-1][0]))
    return out


def _ready_written(h, name: str) -> bool:
    st = json.loads((h.state / name / "status.json").read_text())
    return any(c["type"] == "Ready" and c["status"] == "True" for c in st.get("conditions", []))


def test_etcd_killed_its_dependents_come_back_with_it_and_not_ready_says_why(stack, corpus):
    h = stack
    name, _ = copy_recipe(h, corpus, "srt-slurm-v2/mocker/dynamo-agg.yaml")
    h.start()
    steps = h.wait_steps(name, {"svc-etcd_0", "agg_0", "frontend_0"}, timeout=90)
    endpoint = h.wait_ready(name, timeout=90)["endpoint"]
    model = wait_until(lambda: served(endpoint), timeout=30, what="the model listed through the gateway")
    traffic = Traffic(endpoint, model=model).start()
    watch = Watch(h, name)
    try:
        assert traffic.wait_ok(time.monotonic(), 30)
        # `get` computes its answer itself and may say Ready a pass before the running reconciler
        # has written it: the kill must come after status.json (what the events follow) says so,
        # or its Ready=False is no transition (soak run 2: Ready=True was first written after the
        # recovery, and no event marked the outage)
        wait_until(lambda: _ready_written(h, name), timeout=30, what="status.json Ready=True")
        watch.start()
        killed = time.monotonic()
        scancel(steps["svc-etcd_0"][0])
        # the worker and the frontend read ETCD_ENDPOINTS: both get new lives, on purpose
        wait_until(lambda: all(h.steps(name).get(u, steps[u]) != steps[u] for u in ("agg_0", "frontend_0")),
                   timeout=60, what=f"agg_0 and frontend_0 relaunched with etcd (log:\n{h.log()[-3000:]})")
        back = traffic.wait_ok(time.monotonic(), 60)
        assert back is not None, traffic.failed()[-3:]
        wait_until(lambda: h.get(name)["status"] == "Ready", timeout=30, what="Ready again")
    finally:
        traffic.stop()
        watch.stop.set()
        if watch.is_alive():
            watch.join(30)
    failed = [o for o in traffic.failed() if o.at >= killed]
    gap = traffic.longest_gap(killed, back)
    print(f"\netcd killed: {len(traffic.between(killed, back))} sent, {len(failed)} failed, "
          f"serving again {back - killed:.1f}s after the kill, longest gap {gap:.1f}s")
    # never Ready while requests failed: each failure is inside a NotReady stretch of the status `get`
    # prints, give or take how long the reconciler takes to see a failure (its next pass's probe:
    # DETECT) and a request's error that comes back just after the status turned (LATE)
    stretches = _not_ready_stretches(watch.seen)
    assert stretches, watch.seen[:5]
    outside = [round(o.at - killed, 2) for o in failed
               if not any(a - DETECT <= o.at <= b + LATE for a, b in stretches)]
    assert not outside, (outside, [(round(a - killed, 2), round(b - killed, 2)) for a, b in stretches])
    reasons = {r for _, s, r, _ in watch.seen if s != "Ready"}
    assert reasons & {"NotReady", "FrontendNotAnswering"}, reasons
    # and the events say so, each transition once (what `events` and --notify carry)
    ready = [e for e in map(json.loads, (h.state / "events.jsonl").read_text().splitlines())
             if e["recipe"] == name and e["kind"] == "Condition" and e["message"].startswith("Ready=")]
    first_ready = next(i for i, e in enumerate(ready) if e["message"].startswith("Ready=True"))
    went = [e for e in ready[first_ready:] if e["message"].startswith("Ready=False")]
    if not went:  # the whole record, untruncated (captured stdout): status samples and every event
        print("status samples (s after the kill, phase, reason, message):",
              *[(round(t - killed, 2), *rest) for t, *rest in watch.seen], sep="\n  ")
        print("events:", *[(e["time"], e["kind"], e.get("reason"), e["message"][:120]) for e in
                           map(json.loads, (h.state / "events.jsonl").read_text().splitlines())
                           if e["recipe"] == name], sep="\n  ")
    # (whichever part was still down when the status was first written: the frontend, or the
    # gateway's route to its new life; never the gateway itself, which was not touched)
    assert went and went[0].get("reason") in {"NotReady", "FrontendNotAnswering", "GatewayNotRouting"}, \
        ([(e["message"], e.get("reason")) for e in ready], [(round(t - killed, 2), *rest) for t, *rest in watch.seen])
    cancels = [e["message"] for e in h.actions(name) if e["kind"] == "CancelStep"]
    assert sum("a service it depends on has a new life" in m for m in cancels) == 2, cancels
