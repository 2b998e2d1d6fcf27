"""A stream cut by its worker's death, through the gateway on the real Slurm (issue 48, item 8): the
client's 200 ended with a clean chunked end and no error, as if the answer were whole; now the
built-in router's error event reaches the client through nginx."""

from __future__ import annotations

import http.client
import json
from urllib.parse import urlsplit

import pytest

from harness import Harness, scancel
from helpers import sse_events
from support.recipes import ROUTED

pytestmark = pytest.mark.slurm


def test_a_worker_killed_mid_stream_ends_the_clients_stream_with_an_error_event(tmp_path, summary):
    h = Harness(tmp_path, "slurm")
    try:
        name = h.name("cut")
        # slow tokens: the stream is still running when its worker is killed
        (h.manifests / f"{name}.yaml").write_text(ROUTED.format(name=name).replace("speedup_ratio: 100",
                                                                                   "speedup_ratio: 1"))
        h.start()
        endpoint = h.wait_ready(name, timeout=90)["endpoint"]
        gateway = json.loads((h.state / name / "gateway.json").read_text())
        assert urlsplit(endpoint).port == gateway["port"], (endpoint, gateway)  # through nginx
        victim = h.steps(name)["agg_0"][0]
        u = urlsplit(endpoint)
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
        conn.request("POST", "/v1/chat/completions", headers={"Content-Type": "application/json"},
                     body=json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}],
                                      "max_tokens": 20000, "stream": True}))
        r = conn.getresponse()
        assert r.status == 200, r.read()[:300]
        got = r.readline()
        while not got.startswith(b"data: "):
            got = r.readline()
        scancel(victim)
        raw = got + r.read()  # a clean end after the error event: no exception
        conn.close()
        events = sse_events(raw)
        assert "[DONE]" not in events and all("choices" in e for e in events[:-1]), raw[-400:]
        err = events[-1]["error"]
        assert err["code"] == 502 and "failed mid-response" in err["message"], err
        summary(f"stream cut by scancel of its worker: {len(events) - 1} token events, then "
                f"error event: {err['message'][:80]}")
    finally:
        h.cleanup()
