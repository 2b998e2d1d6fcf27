"""What both kinds of gateway share: the record ``state/<recipe>/gateway.json``, the prefix
``state/<recipe>/gateway/`` (nginx's -p: config, pid file, logs), their events and the restart
backoff. A gateway next to the reconciler is ``shell/gateway/host.py``; one in its own Slurm job,
``shell/gateway/job.py``."""

from __future__ import annotations

import http.client
import json
from dataclasses import dataclass
from pathlib import Path

import structlog

from reconciler.drivers.state import StateDir
from reconciler.gateway import ANY, instance
from reconciler.shell.gateway.sweep import master_pid

log = structlog.get_logger("reconciler")
OWNER_NAME = "gateway"  # the port registry's owner is <recipe>/gateway
def record_path(root: Path, recipe: str) -> Path:
    return root / recipe / "gateway.json"


def prefix_of(root: Path, recipe: str) -> Path:
    return (root / recipe / "gateway").absolute()


def in_job(rec: dict) -> bool:
    """The record is of a gateway in its own Slurm job (reconcile.gateway.allocation)."""
    return rec.get("mode") == "job"


def health_page(host: str, port: int, timeout: float) -> dict | None:
    """The gateway's ``/gateway/health``, parsed; None without a 200 answer within ``timeout``."""
    try:
        conn = http.client.HTTPConnection(host, port, timeout=timeout)
        conn.request("GET", "/gateway/health")
        resp = conn.getresponse()
        body = resp.read()
        conn.close()
        return json.loads(body) if resp.status == 200 else None
    except (OSError, ValueError, http.client.HTTPException):
        return None


def ours(page: dict | None, root: Path, recipe: str) -> bool:
    """The page is this gateway's (its recipe and state directory), whatever config it serves."""
    return isinstance(page, dict) and page.get("instance") == instance(recipe, prefix_of(root, recipe))


def serving_job(rec: dict) -> bool:
    """A gateway in its own job whose current job runs and has served (confirmed once)."""
    job = rec.get("job")
    return rec.get("jobState") == "RUNNING" and job is not None and rec.get("confirmedJob") == job


@dataclass
class Change:
    kind: str  # GatewayStarted | GatewayRestarted | GatewayMoved | GatewayReloaded | GatewayFailed | GatewayStopped
    # | GatewayFound (its state removed, the running master adopted) | GatewayReplaced (one not adoptable ended)
    recipe: str
    message: str


class Records:
    """Reading and writing a gateway's record; a failure said once (an event), not every pass."""

    state: StateDir

    def _record(self, recipe: str) -> dict:
        return self.state.read_json(record_path(self.state.root, recipe), {}, lambda d: isinstance(d, dict))

    def _write(self, recipe: str, rec: dict) -> None:
        self.state.write_json(record_path(self.state.root, recipe), rec)

    def _failed(self, recipe: str, why: str) -> list[Change]:
        rec = self._record(recipe)
        if rec.get("lastError") == why:
            return []
        self._write(recipe, {**rec, "lastError": why})
        log.error("gateway failed", recipe=recipe, error=why)
        return [Change("GatewayFailed", recipe, why)]


def facts(root: Path, recipe: str) -> dict | None:
    """What get/describe/status say about a recipe's gateway (read-only: no write, no start)."""
    try:
        rec = json.loads(record_path(root, recipe).read_text())
        # bound to one address (reconcile.gateway.listen): that address is the endpoint
        scheme = "https" if rec.get("tls") else "http"  # reconcile.gateway.tls
        url = f"{scheme}://{rec['host'] if rec.get('listen', ANY) in (ANY, '[::]') else rec['listen']}:{int(rec['port'])}"
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if in_job(rec):  # its own Slurm job: running, answering its probe, serving what it was given
        mute = rec.get("answering") is False
        # its job runs and served this job's config once (not a job just started, nor another's)
        job = rec.get("job")
        up = serving_job(rec) and not mute
        return {"url": url, "up": up, "pid": None, "job": job, "upstreams": list(rec.get("upstreams") or []),
                "restarts": int(rec.get("restarts", 0) or 0),
                "reason": None if up else f"not answering: {rec.get('probeError')}" if mute
                else (rec.get("lastError") or (f"gateway job {job} is starting on {rec.get('host')} (not serving yet)"
                                               if rec.get("jobState") == "RUNNING" else f"gateway job {job} is not running"))}
    pid = master_pid(prefix_of(root, recipe))
    # a running master whose last end-to-end probe failed is down too (shell/gateway/answering.py)
    mute = pid is not None and rec.get("answering") is False
    return {"url": url, "up": pid is not None and not mute, "pid": pid, "upstreams": list(rec.get("upstreams") or []),
            "restarts": int(rec.get("restarts", 0) or 0),
            "reason": None if pid and not mute else f"not answering: {rec.get('probeError')}" if mute
            else (rec.get("lastError") or "the gateway's nginx master is not running")}
