"""Generic services on the real Slurm: {port} from the allocator, probes paced by interval_seconds,
a worker-node placement (one node here: one instance, on the worker's node).

The service is Python's own ``http.server``: it logs every request it answers with a
timestamp, so the test reads from the service itself how often the reconciler probed it.
"""

from __future__ import annotations

import re
from datetime import datetime

import pytest

from harness import Harness, scancel
from helpers import get, wait_until
from load import scaled
from reconciler.drivers.state import StateDir

pytestmark = pytest.mark.slurm

RECIPE = """\
name: {name}
model: {{path: m}}
resources: {{gpus_per_node: 8}}
engine: {{type: mocker, speedup_ratio: 100}}
roles: {{agg: {{workers: 1, gpus: 1}}}}
frontend: {{type: none}}
services:
  - name: web
    command: [python3, -u, -m, http.server, '{{port}}', --bind, 0.0.0.0]
    start: before_workers
    readiness: {{http: {{port: '{{port}}', path: /}}, interval_seconds: {interval}}}
  - name: mon
    placement: {{node: workers}}
    command: [python3, -m, http.server, '{{port}}', --bind, 0.0.0.0]
    start: before_workers
    readiness: {{port: '{{port}}'}}
"""

PROBE = re.compile(r'\[(\d\d/\w{3}/\d{4} \d\d:\d\d:\d\d)\] "GET / HTTP')


@pytest.fixture
def h(tmp_path):
    harness = Harness(tmp_path, "slurm")
    yield harness
    harness.cleanup()


def probes(h: Harness, name: str) -> list[datetime]:
    text = "".join(p.read_text(errors="replace") for p in sorted((h.state / name / "logs").glob("svc-web_0.*.log")))
    return [datetime.strptime(t, "%d/%b/%Y %H:%M:%S") for t in PROBE.findall(text)]


def test_a_generic_service_on_its_allocated_port_probed_no_more_often_than_its_interval(h):
    name = h.name("svc")
    interval = 4
    (h.manifests / f"{name}.yaml").write_text(RECIPE.format(name=name, interval=interval))
    h.start()
    h.wait_ready(name, timeout=90)
    steps = h.steps(name)
    assert set(steps) == {"svc-web_0", "svc-mon_0", "agg_0"}
    assert steps["svc-mon_0"][1] == steps["agg_0"][1]  # a workers placement: on the worker's node
    (node_ports,) = StateDir(h.state).launches(name)["svc-web_0"]["ports"].values()
    port = node_ports["port"]
    lo, hi = map(int, h.env["RECONCILER_PORT_RANGE"].split("-"))
    assert lo <= port <= hi  # the allocator's, inside this reconciler's range
    (_, node) = h.steps(name)["svc-web_0"]
    assert get(f"http://{node}:{port}/missing", timeout=5)[0] == 404  # the service listens where it was told
    # from here on only the loop probes (``get`` probes once when asked, as wait_ready did):
    # several probes, each at least the interval after the last (the log's clock has 1 s steps)
    quiet, ticks = datetime.now().replace(microsecond=0), h.ticks()
    seen = wait_until(lambda: len(p := [t for t in probes(h, name) if t > quiet]) >= 4 and p, timeout=90,
                      what="four probes")
    gaps = [(b - a).total_seconds() for a, b in zip(seen, seen[1:])]
    assert min(gaps) >= interval - 1, gaps
    assert h.ticks() - ticks > len(seen), "the loop ran more often than the service was probed"
    # killed: relaunched on the same allocated port, and Ready again
    victim = h.steps(name)["svc-web_0"][0]
    scancel(victim)
    wait_until(lambda: (s := h.steps(name).get("svc-web_0")) and s[0] != victim, timeout=60, what="svc-web_0 back")
    # the web service is not critical (a generic service's default): the recipe stays Ready while
    # it is down, so its own row says when the new life passed its probe
    wait_until(lambda: (g := h.get(name))["status"] == "Ready" and g["roles"]["svc-web"]["ready"] == 1,
               timeout=scaled(60), what="svc-web_0 Ready again")
    (again,) = StateDir(h.state).launches(name)["svc-web_0"]["ports"].values()
    assert again["port"] == port
    assert get(f"http://{node}:{port}/missing", timeout=5)[0] == 404
