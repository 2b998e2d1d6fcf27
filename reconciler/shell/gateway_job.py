"""A deployment's gateway in its own small Slurm job on a named node (``reconcile.gateway.allocation``).

The job is CPU only (one task, one CPU, no GPU) and pinned with ``--nodelist``: the endpoint is
``http://<node>:<port>``, and both are kept in ``gateway.json`` for the deployment's life, as a
gateway next to the reconciler keeps its own. Its batch step is ``reconciler.gateway.agent``,
which runs nginx (the config this module renders into ``state/<recipe>/gateway/``, on the shared
file system the workers' logs are on) and the holder, and restarts either if it exits.

Each tick (``sync``): the config is rendered from the Ready frontends; the job is looked up by its
name (squeue), submitted when there is none (the first time at once, after an ended job with
the doubling backoff), and once it runs, a changed config is written and the agent gets SIGHUP
through ``scancel --batch`` (nginx reloads gracefully). Every reload is confirmed through the
gateway's own ``/gateway/health`` on the node: what the record says it serves, it serves.

Limits (docs/recipes.md): the node down, or the job at its time limit, is a gap until a new job
runs on that node; at zero a deployment is woken by the requests held on the reconciler's host,
so this placement is refused with scale to zero (recipe/model.py).
"""

from __future__ import annotations

import http.client
import json
import shlex
import time
from dataclasses import dataclass
from pathlib import Path

import structlog

from reconciler import labels
from reconciler.core.ports import NodePortAllocator
from reconciler.drivers.base import DriverError
from reconciler.drivers.state import StateDir
from reconciler.fsutil import atomic_write_text
from reconciler.gateway import ANY, GatewayConfig, render
from reconciler.recipe.gateway import DEFAULT_HOLD_S
from reconciler.shell import holder
from reconciler.shell.gateway_record import OWNER_NAME, Change, delay_after, prefix_of, record_path

log = structlog.get_logger("reconciler")
AGENT = "reconciler.gateway.agent"
CONFIRM_TIMEOUT_S = 5.0  # a signal goes through slurmctld and slurmd: slower than a local kill
LOOK_AGAIN_S = 1.0  # while the job is pending or not confirmed: when the loop looks again
RUNNING = ("RUNNING",)
RETIRED = "retired.json"  # in the prefix: job ids told to stop (kept past the record, which a stop deletes)
KEEP_RETIRED = 32
ALIVE = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING")


@dataclass(frozen=True)
class Placement:
    """Where the job runs: reconcile.gateway.allocation, with the recipe's slurm: defaults."""

    node: str
    partition: str | None = None
    account: str | None = None
    time: str | None = None


@dataclass(frozen=True)
class Job:
    id: str
    state: str
    node: str
    reason: str


def placement(recipe) -> Placement | None:
    """Where a recipe's gateway job runs (None: next to the reconciler). Partition and account
    default to the recipe's slurm: section (and so to the cluster config's defaults)."""
    a = recipe.reconcile.gateway.allocation
    if a is None:
        return None
    return Placement(a.node, a.partition or recipe.slurm.partition, a.account or recipe.slurm.account, a.time)


def batch_script(python: str, nginx: str, prefix: Path, holder_argv: list[str]) -> str:
    """The job's batch script: the agent, every word quoted (a state directory may hold anything)."""
    argv = [python, "-m", AGENT, "--prefix", str(prefix), "--nginx", nginx, "--holder", *holder_argv]
    return ("#!/bin/sh\n# the gateway's own job (reconcile.gateway.allocation), written by the reconciler\n"
            "exec " + " ".join(shlex.quote(a) for a in argv) + "\n")


def sbatch_argv(name: str, place: Placement, script: Path, out: Path) -> list[str]:
    argv = ["sbatch", "--parsable", f"--job-name={name}", "--nodes=1", "--ntasks=1", "--cpus-per-task=1",
            f"--nodelist={place.node}", f"--output={out}", "--open-mode=append", "--no-requeue"]
    argv += [f"--{k}={v}" for k, v in (("partition", place.partition), ("account", place.account),
                                       ("time", place.time)) if v]
    return argv + [str(script)]


def parse_jobs(text: str) -> list[Job]:
    out = []
    for line in text.splitlines():
        parts = line.strip().split("|", 3)
        if len(parts) == 4 and parts[0]:
            out.append(Job(*(p.strip() for p in parts)))
    return out


def served_by(health: dict | None, upstreams: list[str], unproven: bool) -> bool:
    """The gateway's /gateway/health answer says it serves exactly these upstreams."""
    return health is not None and health.get("upstreams") == upstreams and health.get("unproven") == unproven


class GatewayJobs:
    """The gateways that run in their own Slurm job. ``driver``: the Slurm driver (its ``slurm``
    runs a command with the cluster's environment); None under the local driver."""

    def __init__(self, state: StateDir, driver, nginx: str | None, python: str | None = None):
        # the agent and the holder are this package's modules: this interpreter (on the shared file
        # system, as the state directory is), not the engines' (reconcile.engine_python)
        self.state = state
        self.driver = driver if hasattr(driver, "slurm") else None
        self.nginx = nginx or "nginx"  # the node's: the login node's path, the same image
        self.python = python or holder.python()

    # ---------------------------------------------------------------- each tick
    def sync(self, recipe: str, upstreams: list[str], ports: NodePortAllocator, now: float, place: Placement,
             unproven: bool = False, hold: float | None = None) -> list[Change]:
        if self.driver is None:
            return self._fail(recipe, "reconcile.gateway.allocation needs the Slurm driver (run --driver slurm)")
        rec = self._address(recipe, place.node, ports, now)
        prefix = prefix_of(self.state.root, recipe)
        served = sorted(upstreams)
        if hold is not None:
            holder.write_hold(prefix, hold)
        text = render(GatewayConfig(recipe, rec["port"], prefix, tuple(served), unproven, ANY,
                                    rec["holderPort"] if hold is not None else None))
        conf = prefix / "nginx.conf"
        (prefix / "tmp").mkdir(parents=True, exist_ok=True)
        if not conf.exists() or conf.read_text() != text:
            atomic_write_text(conf, text)
        jobs = [j for j in self._find(recipe) if j.state in ALIVE]
        for j in [j for j in jobs if j.node and j.node != place.node]:  # left running elsewhere: ended
            self._retire(recipe, j)
            jobs.remove(j)
        job = next((j for j in jobs if j.id == rec.get("job")), jobs[0] if jobs else None)
        for extra in jobs:  # a second job for one gateway (a submit whose answer was lost): cancelled
            if extra is not job:
                self._retire(recipe, extra)
        if job is None:
            return self._submit(recipe, rec, prefix, place, now)
        if job.state not in RUNNING:
            reason = job.reason if job.reason not in ("", "None", "(null)") else ""
            why = f"gateway job {job.id} is {job.state.lower()} on {place.node}" + (f" ({reason})" if reason else "")
            # said when Slurm says why it waits (Resources, ReqNodeNotAvail...): not for the moment
            # every job is pending before it starts
            changes = [] if rec.get("lastError") == why or not reason else [Change("GatewayWaiting", recipe, why)]
            self._write(recipe, {**rec, "job": job.id, "jobState": job.state, "lastError": why,
                                 "notBefore": now + LOOK_AGAIN_S})
            return changes
        return self._serve(recipe, rec, job, served, unproven, now)

    def _serve(self, recipe: str, rec: dict, job: Job, served: list[str], unproven: bool, now: float) -> list[Change]:
        """The job runs: make it serve ``served`` (a started nginx read the config at its start;
        a running one is sent SIGHUP), confirmed through its health page."""
        changes = []
        first = rec.get("jobState") not in RUNNING or rec.get("job") != job.id
        rec = {**rec, "job": job.id, "jobState": job.state}
        if first:
            again = bool(rec.get("ranBefore"))
            rec.update(startedAt=now, ranBefore=True, restarts=int(rec.get("restarts") or 0) + int(again))
            changes.append(Change("GatewayRestarted" if again else "GatewayStarted", recipe,
                                  f"gateway job {job.id} on {job.node} serves http://{rec['host']}:{rec['port']}"))
        if first or rec.get("upstreams") != served or bool(rec.get("unproven")) != unproven or rec.get("lastError"):
            health = self._health(rec)
            if not served_by(health, served, unproven):
                if health is not None:  # nginx is up with the config before: reload it
                    self.driver.slurm(["scancel", "--batch", "--signal=HUP", job.id], check=False, verb="scancel-hup")
                if not self._confirm(rec, served, unproven):
                    why = "the gateway did not answer with its new upstreams in time; retried next pass"
                    self._write(recipe, {**rec, "lastError": why, "notBefore": now + LOOK_AGAIN_S})
                    return changes + ([] if rec.get("lastError") == why else [Change("GatewayFailed", recipe, why)])
            if not first:
                how = " (none alive: where the frontends are relaunched)" if unproven else ""
                changes.append(Change("GatewayReloaded", recipe, f"upstreams now {', '.join(served) or 'none'}{how}"))
        up = {**rec, "upstreams": served, "unproven": unproven, "lastError": None, "notBefore": None}
        if now - float(rec.get("startedAt") or now) >= 60 and up.get("backoff"):
            up["backoff"] = 0  # stayed up: the next failure resubmits at once again
        if up != self._record(recipe):
            self._write(recipe, up)
        return changes

    def _submit(self, recipe: str, rec: dict, prefix: Path, place: Placement, now: float) -> list[Change]:
        changes = []
        if rec.get("job") and rec.get("exitedAt") is None:  # the job we knew has ended
            end = self.driver.job_end(rec["job"]) if hasattr(self.driver, "job_end") else None
            how = f" ({end[0]}{', ' + end[1] if end and end[1] and end[1] != 'None' else ''})" if end else ""
            backoff = int(rec.get("backoff") or 0)
            rec = {**rec, "exitedAt": now, "jobState": None, "backoff": backoff + 1,
                   "notBefore": now + delay_after(backoff)}
            why = f"gateway job {rec['job']} ended{how}; a new one is submitted on {place.node}"
            changes.append(Change("GatewayFailed", recipe, why))
            self._write(recipe, {**rec, "lastError": why})
        if rec.get("notBefore") and now < rec["notBefore"]:
            return changes
        script = prefix / "gateway.sbatch"
        # its hold is read from hold.json for every request; the argv's is only the fallback
        hold_argv = holder.argv(self.python, recipe, rec["holderPort"], rec["port"], DEFAULT_HOLD_S, prefix)
        atomic_write_text(script, batch_script(self.python, self.nginx, prefix, hold_argv))
        name = labels.gateway_job_name(self.driver.owner, recipe)
        try:
            out = self.driver.slurm(sbatch_argv(name, place, script, prefix / "job.out"), verb="sbatch").stdout
        except DriverError as e:
            backoff = int(rec.get("backoff") or 0)
            why = f"the gateway's job was not submitted: {e}"
            self._write(recipe, {**rec, "lastError": why, "backoff": backoff + 1,
                                 "notBefore": now + max(LOOK_AGAIN_S, delay_after(backoff + 1))})
            return changes + ([] if rec.get("lastError") == why else [Change("GatewayFailed", recipe, why)])
        job = out.strip().split(";", 1)[0]
        self._write(recipe, {**rec, "job": job, "jobState": "PENDING", "submittedAt": now, "exitedAt": None,
                             "lastError": f"gateway job {job} submitted on {place.node}", "notBefore": now + LOOK_AGAIN_S})
        return changes + [Change("GatewaySubmitted", recipe, f"gateway job {job} submitted on {place.node}"
                                 + (f" (partition {place.partition})" if place.partition else ""))]

    # ---------------------------------------------------------------- address
    def _address(self, recipe: str, node: str, ports: NodePortAllocator, now: float) -> dict:
        """The record, with the gateway's and its holder's ports on ``node``: allocated the first
        time, held in the registry ever after (no worker placed there is given them)."""
        rec = self._record(recipe)
        owner = f"{recipe}/{OWNER_NAME}"
        if rec.get("mode") == "job" and rec.get("host") == node and isinstance(rec.get("port"), int) \
                and isinstance(rec.get("holderPort"), int):
            ports.claim(node, owner, "http", rec["port"])
            ports.claim(node, owner, holder.NAME, rec["holderPort"])
            return rec
        port = ports.allocate(node, owner, "http")
        hport = ports.allocate(node, owner, holder.NAME)
        rec = {"mode": "job", "host": node, "port": port, "holderPort": hport, "allocatedAt": now}
        self._write(recipe, rec)
        return rec

    def stop(self, recipe: str, ports: NodePortAllocator) -> list[Change]:
        """The recipe is gone (or its gateway moves): nginx stops once its requests finish (QUIT to
        the agent, which ends the job), the ports are released."""
        rec = self._record(recipe)
        if self.driver is not None:
            for j in self._find(recipe):
                self._retire(recipe, j)
        holder.say_nothing_comes(prefix_of(self.state.root, recipe), holder.DELETED)
        ports.release(f"{recipe}/{OWNER_NAME}")
        path = record_path(self.state.root, recipe)
        if not path.exists():
            return []
        path.unlink()
        return [Change("GatewayStopped", recipe, f"gateway job {rec.get('job')} on {rec.get('host')} stops once its "
                       "requests finish")]

    # ---------------------------------------------------------------- helpers
    def _find(self, recipe: str) -> list[Job]:
        """The recipe's gateway jobs in the queue, but those retired: a job told to QUIT carries
        its last requests to their end under the same name, and is never adopted again."""
        name = labels.gateway_job_name(self.driver.owner, recipe)
        r = self.driver.slurm(["squeue", "-h", "-u", self.driver.user, f"--name={name}", "-o", "%i|%T|%N|%r"],
                              verb="squeue-gateway")
        retired = set(self._retired(recipe))
        return [j for j in parse_jobs(r.stdout) if j.id not in retired]

    def _retire(self, recipe: str, job: Job) -> None:
        """End ``job``: a running one gracefully (QUIT to the agent: nginx finishes what it carries),
        a waiting one at once; either way never taken for the gateway's job again."""
        path = prefix_of(self.state.root, recipe) / RETIRED
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps([*self._retired(recipe), job.id][-KEEP_RETIRED:]))
        if job.state in RUNNING:
            self.driver.slurm(["scancel", "--batch", "--signal=QUIT", job.id], check=False, verb="scancel-quit")
        else:
            self.driver.slurm(["scancel", job.id], check=False)

    def _retired(self, recipe: str) -> list[str]:
        try:
            got = json.loads((prefix_of(self.state.root, recipe) / RETIRED).read_text())
        except (OSError, ValueError):
            return []
        return [str(j) for j in got] if isinstance(got, list) else []

    def _health(self, rec: dict, timeout: float = 1.0) -> dict | None:
        try:
            conn = http.client.HTTPConnection(rec["host"], rec["port"], timeout=timeout)
            conn.request("GET", "/gateway/health")
            resp = conn.getresponse()
            body = resp.read()
            conn.close()
            return json.loads(body) if resp.status == 200 else None
        except (OSError, ValueError, http.client.HTTPException):
            return None

    def _confirm(self, rec: dict, served: list[str], unproven: bool) -> bool:
        deadline = time.monotonic() + CONFIRM_TIMEOUT_S
        while time.monotonic() < deadline:
            if served_by(self._health(rec), served, unproven):
                return True
            time.sleep(0.05)
        return False

    def _fail(self, recipe: str, why: str) -> list[Change]:
        rec = self._record(recipe)
        if rec.get("lastError") == why:
            return []
        self._write(recipe, {**rec, "mode": "job", "lastError": why})
        log.error("gateway failed", recipe=recipe, error=why)
        return [Change("GatewayFailed", recipe, why)]

    def _record(self, recipe: str) -> dict:
        return self.state.read_json(record_path(self.state.root, recipe), {}, lambda d: isinstance(d, dict))

    def _write(self, recipe: str, rec: dict) -> None:
        self.state.write_json(record_path(self.state.root, recipe), rec)


__all__ = ["GatewayJobs", "Placement", "placement", "batch_script", "sbatch_argv", "parse_jobs", "served_by"]
