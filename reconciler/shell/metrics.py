"""The reconciler's own Prometheus metrics (``run --metrics-addr HOST:PORT``).

Updated once per tick from what the tick already computed (the snapshot, the actions
done, the driver's command counts); served by prometheus-client's HTTP server thread
from a private registry, so nothing here can slow the loop down.
"""

from __future__ import annotations

from collections import Counter as Tally

import threading
from wsgiref.simple_server import make_server

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer, _SilentHandler

from reconciler import hostguard

from reconciler.shell.snapshot import Snapshot

TICK_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
READY_BUCKETS = (1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800)


# gauge suffix -> help; each from the last run's summary (reconciler/benchrun/summary.py)
BENCH_GAUGES = {
    "succeeded": "1 when the deployment's last benchmark run Succeeded, 0 when it Failed or was Cancelled",
    "requests_per_second": "Request throughput of the last benchmark run (its highest concurrency)",
    "output_tokens_per_second": "Output token throughput of the last benchmark run (its highest concurrency)",
    "ttft_p50_seconds": "Time to first token, p50, of the last benchmark run",
    "ttft_p99_seconds": "Time to first token, p99, of the last benchmark run",
    "itl_p50_seconds": "Inter-token latency, p50, of the last benchmark run",
    "itl_p99_seconds": "Inter-token latency, p99, of the last benchmark run",
    "errors": "Failed requests of the last benchmark run",
    "output_tokens": "Output tokens of the last benchmark run",
    "duration_seconds": "Wall time of the last benchmark run",
    "ended_timestamp_seconds": "When the last benchmark run ended (Unix time)",
}
_FROM_SUMMARY = {"requests_per_second": ("req_s", 1), "output_tokens_per_second": ("output_tok_s", 1),
                 "ttft_p50_seconds": ("ttft_p50_ms", 1e-3), "ttft_p99_seconds": ("ttft_p99_ms", 1e-3),
                 "itl_p50_seconds": ("itl_p50_ms", 1e-3), "itl_p99_seconds": ("itl_p99_ms", 1e-3),
                 "errors": ("errors", 1), "output_tokens": ("output_tokens", 1),
                 "duration_seconds": ("duration_s", 1), "ended_timestamp_seconds": ("ended", 1)}


class Metrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.tick = Histogram("reconciler_tick_seconds", "Time one reconcile pass took", registry=r,
                              buckets=TICK_BUCKETS)
        self.actions = Counter("reconciler_actions", "Actions taken", ["kind", "outcome"], registry=r)
        self.slurm = Counter("reconciler_slurm_commands", "Slurm commands run", ["verb", "outcome"], registry=r)
        self.tick_failures = Counter("reconciler_tick_failures", "Reconcile passes that failed", registry=r)
        self.recipes = Gauge("reconciler_recipes", "Recipes by phase", ["phase"], registry=r)
        # kube-state-metrics' kube_deployment_status_condition: 1 while the condition is True
        self.conds = Gauge("reconciler_condition", "A deployment's condition (Available, Progressing, Ready, "
                           "Degraded, Invalid): 1 True, 0 False", ["recipe", "condition"], registry=r)
        self._cond_series: set[tuple[str, str]] = set()
        self.workers = Gauge("reconciler_workers", "Workers (and services) per recipe and role",
                             ["recipe", "role", "state"], registry=r)
        self.restarts = Gauge("reconciler_restarts", "Relaunches after a failure, per recipe and role",
                              ["recipe", "role"], registry=r)
        self.ready_after = Histogram("reconciler_launch_to_ready_seconds", "From a launch to the unit's Ready",
                                     ["role"], registry=r, buckets=READY_BUCKETS)
        self.pending = Gauge("reconciler_pending_seconds", "Seconds the longest-waiting pending allocation of a "
                             "deployment has waited in Slurm's queue (0: none pending)", ["recipe"], registry=r)
        # the last benchmark run of each deployment (state/<recipe>/benchmarks/): one gauge per figure
        self.bench = {k: Gauge(f"reconciler_benchmark_{k}", why, ["recipe"], registry=r) for k, why in BENCH_GAUGES.items()}
        self._bench_series: set[str] = set()
        # each role's measured launch-to-Ready (state/<recipe>/startup.json): p50 and p90 of its recent
        # lives; a role with none measured has the health-check budget, its bound (source="budget")
        self.startup = Gauge("reconciler_startup_seconds", "Launch to Ready of a role's recent lives",
                             ["recipe", "role", "quantile", "source"], registry=r)
        self._startup_series: set[tuple[str, str, str, str]] = set()
        self._launched: dict[tuple[str, str, int], float] = {}  # unit key -> when its launch was issued
        self._seen_commands: Tally = Tally()
        self._series: set[tuple[str, str, str]] = set()
        self._pending_series: set[str] = set()

    def benchmarks(self, last: dict[str, dict]) -> None:
        """``last``: recipe -> its last benchmark summary (recipes without one have no series)."""
        for name in self._bench_series - set(last):
            for g in self.bench.values():
                g.remove(name)
        for name, doc in last.items():
            self.bench["succeeded"].labels(name).set(1 if doc.get("status") == "Succeeded" else 0)
            for key, (field, scale) in _FROM_SUMMARY.items():
                v = doc.get(field)
                self.bench[key].labels(name).set(float(v) * scale if isinstance(v, (int, float)) else float("nan"))
        self._bench_series = set(last)

    def conditions(self, statuses: dict[str, list]) -> None:
        """``statuses``: recipe -> its recorded conditions (status.json); a deleted recipe's series go."""
        series = set()
        for name, conds in statuses.items():
            for c in conds:
                if isinstance(c, dict) and c.get("type") and c.get("status") in ("True", "False"):
                    self.conds.labels(name, c["type"]).set(1.0 if c["status"] == "True" else 0.0)
                    series.add((name, c["type"]))
        for gone in self._cond_series - series:
            self.conds.remove(*gone)
        self._cond_series = series

    def startups(self, summaries: dict[str, dict]) -> None:
        """``summaries``: recipe -> role -> the startup summary (startup_log.brief); gone ones removed."""
        series = set()
        for name, roles in summaries.items():
            for role, s in roles.items():
                for q, key in (("0.5", "p50"), ("0.9", "p90")):
                    if isinstance(s.get(key), (int, float)):
                        labels = (name, role, q, str(s.get("source")))
                        self.startup.labels(*labels).set(float(s[key]))
                        series.add(labels)
        for gone in self._startup_series - series:
            self.startup.remove(*gone)
        self._startup_series = series

    def serve(self, addr: str, token: str | None = None) -> None:
        """prometheus-client's own server, behind a check of ``Host:`` (DNS rebinding) and, with
        ``token`` (``run --http-token-file``), of ``Authorization: Bearer`` (Prometheus's
        ``authorization.credentials_file``)."""
        host, _, port = addr.rpartition(":")
        names = hostguard.own_names(host or "0.0.0.0")
        app = make_wsgi_app(self.registry)

        def guarded(environ, start_response):
            if not hostguard.host_allowed(environ.get("HTTP_HOST"), names):
                start_response("421 Misdirected Request", [("Content-Type", "text/plain")])
                return [b"these metrics answer only to their own host name\n"]
            headers = {"Authorization": environ.get("HTTP_AUTHORIZATION"), "Cookie": environ.get("HTTP_COOKIE")}
            if not hostguard.token_ok(hostguard.presented(headers, environ.get("QUERY_STRING", ""))[0], token):
                start_response("401 Unauthorized", [("Content-Type", "text/plain"), ("WWW-Authenticate", "Bearer")])
                return [b"a token is required (run --http-token-file): Authorization: Bearer <token>\n"]
            return app(environ, start_response)

        server = make_server(host or "0.0.0.0", int(port), guarded, ThreadingWSGIServer, handler_class=_SilentHandler)
        threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()

    def action(self, kind: str, ok: bool) -> None:
        self.actions.labels(kind, "ok" if ok else "failed").inc()

    def tick_failed(self, driver_commands: Tally) -> None:
        """A failed pass still counts its commands: the failed ones by verb say what failed."""
        self.tick_failures.inc()
        self._count_commands(driver_commands)

    def _count_commands(self, driver_commands: Tally) -> None:
        for (verb, ok), n in (driver_commands - self._seen_commands).items():
            self.slurm.labels(verb, "ok" if ok else "failed").inc(n)
        self._seen_commands = Tally(driver_commands)

    def observe_tick(self, snap: Snapshot, done: list, seconds: float, driver_commands: Tally,
                     phases: dict[str, str], restarts: dict[tuple[str, str], int]) -> None:
        self.tick.observe(seconds)
        self._count_commands(driver_commands)
        for phase in ("Ready", "Progressing", "Degraded", "Invalid", "Suspended", "ScaledToZero", "Error"):
            self.recipes.labels(phase).set(sum(p == phase for p in phases.values()))
        series: set[tuple[str, str, str]] = set()
        for name, rp in snap.plan.recipes.items():
            for role, c in rp.counts.items():
                for state, n in (("desired", c.desired), ("running", c.running), ("ready", c.ready)):
                    self.workers.labels(name, role, state).set(n)
                    series.add((name, role, state))
        for gone in self._series - series:  # a deleted recipe's series disappear with it
            self.workers.remove(*gone)
        self._series = series
        waited: dict[str, float] = {name: 0.0 for name in snap.desired.recipes}
        for a in snap.observed.allocs:
            info = snap.observed.pending.get(a.job_id)
            if info is not None and a.recipe in waited:
                waited[a.recipe] = max(waited[a.recipe], info.waited(snap.now))
        for name in self._pending_series - set(waited):
            self.pending.remove(name)
        for name, sec in waited.items():
            self.pending.labels(name).set(sec)
        self._pending_series = set(waited)
        for (name, role), n in restarts.items():
            self.restarts.labels(name, role).set(n)
        for a in done:
            unit = getattr(a, "unit", None)
            if type(a).__name__ == "LaunchStep" and unit is not None and getattr(a.launch, "rank", 0) == 0:
                self._launched[unit.key] = snap.now
        for key, at in list(self._launched.items()):
            if snap.observed.ready.get(key):
                self.ready_after.labels(key[1]).observe(max(0.0, snap.now - at))
                del self._launched[key]
