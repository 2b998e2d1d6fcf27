"""Each gateway asked, end to end, whether it answers: a live nginx master is not a serving
gateway (a stopped or wedged worker keeps the port and answers nothing).

At each pass of the loop, at most every ``PROBE_EVERY`` seconds, each running gateway is sent
``GET /gateway/health`` on its own port, in parallel on the probe threads, ``probe.TIMEOUT``
each. ``PROBE_FAILURES`` unanswered probes in a row (one slow answer on a loaded login node is
not an outage) mark it in its record (``gateway.json``: ``answering``, ``probeFailures``,
``probeError``), which ``gateway.facts`` reads: down for ``get``, ``describe``, the Ready
condition (``GatewayDown``) and the metrics. Each episode is one ``GatewayNotAnswering`` event
and one ``GatewayAnswering``. A gateway that (re)starts is taken to answer until probed; a
settled gateway's record is not rewritten.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from reconciler.drivers.state import StateDir
from reconciler.shell.readiness import probe
from reconciler.shell.gateway.record import Change, in_job, prefix_of, record_path
from reconciler.shell.gateway.sweep import master_pid
from reconciler.shell.gateway.record import ours, serving_job

PROBE_EVERY = 1.0  # seconds between two probes of a gateway
PROBE_FAILURES = 2  # unanswered probes in a row that make a gateway down


class GatewayProbe:
    """The end-to-end probe's pace, one per controller: when it last probed."""

    def __init__(self) -> None:
        self.probed_at: float | None = None

    def probe(self, state: StateDir, recipes: Iterable[str], now: float) -> list[Change]:
        """Probe the running gateways of ``recipes`` when due; each change said once."""
        if self.probed_at is not None and 0 <= now - self.probed_at < PROBE_EVERY:
            return []
        self.probed_at = now
        return probe_gateways(state, recipes)


def probe_gateways(state: StateDir, recipes: Iterable[str]) -> list[Change]:
    """Probe the running gateways of ``recipes`` now (``GatewayProbe.probe`` paces it)."""
    targets: dict[str, tuple[str, dict]] = {}
    for name in recipes:
        rec = state.read_json(record_path(state.root, name), {}, lambda d: isinstance(d, dict))
        if not isinstance(rec.get("port"), int):
            continue
        if in_job(rec):  # in its own job: probed on its node once the job runs and has served
            if serving_job(rec):
                targets[name] = (f"http://{rec['host']}:{rec['port']}/gateway/health", rec)
        elif master_pid(prefix_of(state.root, name)) is not None:
            targets[name] = (f"http://127.0.0.1:{rec['port']}/gateway/health", rec)
    pages = probe.fetch_all(url for url, _ in targets.values())
    changes = []
    for name, (url, rec) in targets.items():
        # on a node, the page must be this gateway's: another reconciler's nginx may hold the port
        answered = pages.get(url) is not None and (not in_job(rec) or ours(_parsed(pages[url]), state.root, name))
        failures = 0 if answered else int(rec.get("probeFailures") or 0) + 1
        error = None if answered else f"GET {url} gave no answer within {probe.TIMEOUT:g}s (or an error status)"
        was = rec.get("answering") is not False  # never probed yet (None): taken to answer
        now_up = answered or (was and failures < PROBE_FAILURES)
        if was and not now_up:
            changes.append(Change("GatewayNotAnswering", name, f"the gateway is running but {error} "
                                  f"({failures} probes in a row)"))
        elif now_up and not was:
            changes.append(Change("GatewayAnswering", name, f"the gateway answers {url} again"))
        if was != now_up or int(rec.get("probeFailures") or 0) != failures:
            state.write_json(record_path(state.root, name), {**rec, "answering": now_up, "probeFailures": failures,
                                                             "probeError": error})
    return changes


def _parsed(page: str | None) -> dict | None:
    try:
        return json.loads(page or "")
    except ValueError:
        return None
