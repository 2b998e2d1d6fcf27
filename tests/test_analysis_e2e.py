"""Rollout analysis on the real local Slurm (reconcile.rollout.analysis): a one-worker mocker stack
behind the built-in router and the gateway, a bounded client loop through the endpoint the whole
time. A rollout to a 3x slower decode (the mocker's decode_speedup_ratio) is measured on the new
life's own address, judged, and stopped: the new life is cancelled without ever being routed, the
old one serves on, the recipe says RolloutFailed with the figures, and the spec is not retried. A
good rollout after it (a changed file) passes and replaces the old life. No request fails."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from harness import Harness
from helpers import wait_until
from reconciler.mocker.model_dir import make_model_dir
from support.clients import Client

pytestmark = [pytest.mark.slurm, pytest.mark.needs("aiperf")]

# speedup 1: the decode steps dominate aiperf's own overhead, so a 3x slower decode shows as ~0.4 of
# the output tok/s (measured alone: 951 vs 363 tok/s at concurrency 8). The old life is measured while
# it serves the client loop, the new one before it takes any request: the first run here gave 644
# (old, loaded) vs 356 (slow, 0.55) and 922 (good, 1.43). The bar (0.75) sits between with room.
TEXT = """\
name: {name}
model: {{path: "{model}"}}
resources: {{gpus_per_node: 8}}
engine: {{type: mocker, speedup_ratio: 1, decode_speedup_ratio: {decode}, max_num_seqs: {seqs}}}
roles: {{agg: {{workers: 1, gpus: 1}}}}
frontend: {{type: builtin, args: {{poll-interval: 0.2}}}}
reconcile:
  rollout:
    max_surge: 1
    max_unavailable: 0
    pickup_seconds: 1
    drain_seconds: 1
    analysis:
      benchmark: {{concurrency: 8, requests: 100, isl: 128, osl: 64}}
      max_ttft_p90_ms: 5000
      min_throughput_ratio: 0.75
"""


class Routed(threading.Thread):
    """Every worker URL the endpoints file (what the built-in router reads) ever names, read as
    often as it can until stopped: the measured new life must never be among them."""

    def __init__(self, path: Path):
        super().__init__(daemon=True)
        self.path, self.seen, self.halt = path, set(), threading.Event()

    def run(self) -> None:
        while not self.halt.wait(0.05):
            try:
                self.seen |= {w["url"] for w in json.loads(self.path.read_text())["workers"]}
            except (OSError, ValueError, KeyError):
                pass


def events(h: Harness, name: str, kind: str) -> list[dict]:
    return [e for e in map(json.loads, (h.state / "events.jsonl").read_text().splitlines())
            if e["recipe"] == name and e["kind"] == kind]


def test_a_slower_rollout_is_stopped_by_analysis_and_a_good_one_passes(tmp_path):
    h = Harness(tmp_path, "slurm")
    model = make_model_dir(tmp_path / "tok")
    client = watch = None
    try:
        name = h.name("analysis")
        f = h.manifests / f"{name}.yaml"
        f.write_text(TEXT.format(name=name, model=model, decode=1, seqs=256))
        h.start()
        endpoint = h.wait_ready(name, timeout=90)["endpoint"]
        watch = Routed(h.state / name / "endpoints.json")
        watch.start()
        client = Client(endpoint, limit=20000)
        client.start()
        wait_until(lambda: client.ok >= 5, what=f"requests through the gateway (failed: {client.failed[:3]})")
        (old,) = [(u, slot, sid) for u, slot, sid in h.lives(name) if u == "agg_0"]

        # a 3x slower decode: measured, judged, stopped
        f.write_text(TEXT.format(name=name, model=model, decode=0.333, seqs=256))
        g = wait_until(lambda: (g := h.get(name))["reason"] == "RolloutFailed" and g, timeout=240, interval=0.5,
                       what=f"RolloutFailed ({h.log()[-3000:]})")
        assert "throughput ratio" in g["reasonMessage"] and "< min_throughput_ratio 0.75" in g["reasonMessage"], g
        # the event is the running reconciler's, a tick after the run's file (get reads the file itself)
        (failed,) = wait_until(lambda: events(h, name, "RolloutFailed"), timeout=30, what="the RolloutFailed event")
        assert "new life" in failed["message"] and "old life" in failed["message"], failed
        assert [e["message"] for e in events(h, name, "AnalysisBaseline")] and len(events(h, name, "AnalysisStarted")) == 2
        wait_until(lambda: [(u, s, sid) for u, s, sid in h.lives(name) if u == "agg_0"] == [old], timeout=60,
                   what="only the old life left")
        d = json.loads(h.cli("describe", name, "-o", "json").stdout)
        assert any(c["reason"] == "RolloutFailed" for c in d["conditions"]), d["conditions"]
        text = h.cli("describe", name).stdout
        assert "RolloutFailed" in text and "throughput ratio" in text and "rollout analysis failed" in text, text
        assert "RolloutFailed" in h.cli("get", name).stdout
        # not retried: more ticks, no launch
        h.idle(name, ticks=5)
        n = client.ok
        wait_until(lambda: client.ok >= n + 5, what="requests served by the old life after the failed rollout")
        started = [e["message"] for e in events(h, name, "AnalysisStarted")]
        measured_new = started[-1].rsplit(" ", 1)[-1]  # "... at its own address http://host:port"
        assert measured_new not in watch.seen and len(watch.seen) >= 1, (measured_new, watch.seen)

        # a good change (a new spec hash, the same speed): measured, passed, rolled
        f.write_text(TEXT.format(name=name, model=model, decode=1, seqs=128))
        wait_until(lambda: events(h, name, "AnalysisPassed"), timeout=240, interval=0.5,
                   what=f"AnalysisPassed ({h.log()[-3000:]})")
        wait_until(lambda: (now := [x for x in h.lives(name) if x[0] == "agg_0"]) and len(now) == 1
                   and now[0][2] != old[2], timeout=60, what="the old life replaced")
        g = h.wait_ready(name, timeout=60)
        assert g["reason"] is None and g["endpoint"] == endpoint, g
        n = client.ok
        wait_until(lambda: client.ok >= n + 5, what="requests after the good rollout")
        client.halt.set()
        client.join(15)
        assert client.failed == [], client.failed[:5]
        assert client.ok > 0
        print(f"client: {client.ok} ok, {len(client.failed)} failed; {failed['message']}; "
              f"passed: {events(h, name, 'AnalysisPassed')[0]['message']}")
    finally:
        for t in (client, watch):
            if t is not None:
                t.halt.set()
                t.join(15)
        h.cleanup()
