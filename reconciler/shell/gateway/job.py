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

from pathlib import Path

import structlog

from reconciler import labels
from reconciler.core.plan.gateway import (
    LOOK_LATER_S, LOOK_SOON_S, backoff_after, confirm_overdue, look_again_in, resubmit_delay,
)
from reconciler.core.ports import NodePortAllocator
from reconciler.drivers.base import DriverError
from reconciler.drivers.state import StateDir
from reconciler.fsutil import atomic_write_text
from reconciler.gateway import ANY, GatewayConfig, render, version
from reconciler.recipe.gateway import DEFAULT_HOLD_S
from reconciler.shell.gateway import holder_supervisor
from reconciler.shell.gateway.confine import nginx_user, unsafe_prefix
from reconciler.shell.gateway.job_slurm import (
    RUNNING, Job, Placement, batch_script, parse_jobs, pick, sbatch_argv,
)
from reconciler.shell.gateway.record import OWNER_NAME, Change, Records, health_page, ours, prefix_of, record_path

log = structlog.get_logger("reconciler")
HEALTH_TIMEOUT_S = 0.5  # one look per pass: a tick never waits on a node for longer
RECHECK_S = 30.0  # a settled gateway's page is looked at this often (still this one, this config?)
HUP_SETTLE_S = 0.5  # after a HUP, old workers still answer for a moment: not taken as confirmation
MISSING_S = 30.0  # a job squeue stopped listing, that Slurm cannot describe, is taken as ended after this
PORT_BLOCK_S = 3600.0  # a port another process held on the node is not offered again this long
RETIRED_GONE = ("already completing or completed", "Invalid job id")  # scancel of a job already gone
RETIRED = "retired.json"  # in the prefix: job ids told to stop (kept past the record, which a stop deletes)
KEEP_RETIRED = 32
ALIVE = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING")


class GatewayJobs(Records):
    """The gateways that run in their own Slurm job. ``driver``: the Slurm driver (its ``slurm``
    runs a command with the cluster's environment); None under the local driver."""

    def __init__(self, state: StateDir, driver, nginx: str | None, python: str | None = None,
                 door_memory: holder_supervisor.DoorMemory | None = None):
        # the agent and the holder are this package's modules: this interpreter (on the shared file
        # system, as the state directory is), not the engines' (reconcile.engine_python)
        self.state = state
        self.driver = driver if hasattr(driver, "slurm") else None
        self.nginx = nginx or "nginx"  # the node's: the login node's path, the same image
        self.python = python or holder_supervisor.python()
        self._seen: dict[str, float] = {}  # recipe -> when squeue last listed its job (kept in memory)
        self._checked: dict[str, float] = {}  # recipe -> the last look at a settled gateway's page
        # the host gateways' own: a gateway moved between modes is not said to have a bad keys file twice
        self.door_memory = door_memory or holder_supervisor.DoorMemory()

    # ---------------------------------------------------------------- each tick
    def sync(self, recipe: str, upstreams: list[str], ports: NodePortAllocator, now: float, place: Placement,
             unproven: bool = False, hold: float | None = None, door: dict | None = None) -> list[Change]:
        """One look, never a wait: the job found (or submitted), the config written, a reload
        asked or checked once; the loop comes back soon (``notBefore``) while one is due."""
        if self.driver is None:
            return self._failed(recipe, "reconcile.gateway.allocation needs the Slurm driver (run --driver slurm)")
        rec, changes = self._address(recipe, place.node, ports, now)
        prefix = prefix_of(self.state.root, recipe)
        if hold is not None:
            holder_supervisor.write_hold(prefix, hold)
        # the job's holder always runs: it reads the keys file named here from the shared file system
        said = holder_supervisor.write_door(prefix, rec, door, self.door_memory) if door is not None else []
        changes += [Change(kind, recipe, msg) for kind, msg in said]
        cfg = GatewayConfig(recipe, rec["port"], prefix, tuple(sorted(upstreams)), unproven, ANY,
                            rec["holderPort"] if hold is not None else None,
                            rec["holderPort"] if door and door.get("keys") else None,
                            user=nginx_user())  # the job runs as the reconciler's user: so do its workers
        text = render(cfg)
        conf = prefix / "nginx.conf"
        if (unsafe := unsafe_prefix(prefix, self.state.root)) is not None:
            return changes + self._failed(recipe, unsafe)
        if not conf.exists() or conf.read_text() != text:
            atomic_write_text(conf, text)
        jobs = [j for j in self._find(recipe) if j.state in ALIVE]
        for j in [j for j in jobs if j.node and j.node != place.node]:  # left running elsewhere: ended
            self._retire(recipe, j)
            jobs.remove(j)
        job = pick(jobs, rec.get("job"))
        for extra in jobs:  # a second job for one gateway (a submit whose answer was lost): cancelled
            if extra is not job:
                self._retire(recipe, extra)
        if job is None:
            return changes + self._submit(recipe, rec, prefix, place, now)
        self._seen[recipe] = now
        if job.state not in RUNNING:
            reason = job.reason if job.reason not in ("", "None", "(null)") else ""
            why = f"gateway job {job.id} is {job.state.lower()} on {place.node}" + (f" ({reason})" if reason else "")
            # said once per job and state when Slurm says why it waits (Resources, ReqNodeNotAvail...;
            # its reason may flip between two): not for the moment every job is pending before it starts
            said = f"{job.id}:{job.state}"
            if reason and rec.get("waitingSaid") != said:
                changes.append(Change("GatewayWaiting", recipe, why))
                rec = {**rec, "waitingSaid": said}
            late = bool(reason) or confirm_overdue(now - float(rec.get("submittedAt") or 0))
            self._write(recipe, {**rec, "job": job.id, "jobState": job.state, "lastError": why,
                                 "notBefore": now + look_again_in(late)})
            return changes
        return changes + self._serve(recipe, rec, job, cfg, ports, now)

    def _serve(self, recipe: str, rec: dict, job: Job, cfg: GatewayConfig, ports: NodePortAllocator,
               now: float) -> list[Change]:
        """The job runs: make it serve ``cfg`` (a started nginx read the config at its start; a
        running one is sent SIGHUP), confirmed by its health page: this gateway's (``instance``),
        with this config's version, asked after the reload had a moment to retire old workers."""
        want = version(cfg)
        if rec.get("job") != job.id or rec.get("jobState") not in RUNNING:  # a job seen running first
            rec = {**rec, "job": job.id, "jobState": job.state, "runningSince": now, "hupFor": None, "hupAt": None,
                   "wantedSince": None, "overdueSaid": None, "lastError": None}
        health: dict | None = None
        if rec.get("confirmed") == want and rec.get("confirmedJob") == job.id:
            if now - self._checked.get(recipe, 0.0) < RECHECK_S:
                return self._settled(recipe, rec, now)
            self._checked[recipe] = now  # now and then: still this gateway, with this config?
            health = self._health(rec)
            silent = health is None and not self._agent(recipe, job).get("bindFailed")
            if silent or (ours(health, self.state.root, recipe) and health.get("version") == want):
                return self._settled(recipe, rec, now)  # no answer is the probe's to say (GatewayNotAnswering)
            rec = {**rec, "confirmed": None, "wantedSince": [want, now]}  # the grace starts now
        else:
            health = self._health(rec)
        if (rec.get("wantedSince") or [None])[0] != want:
            rec["wantedSince"] = [want, now]
        since = float(rec["wantedSince"][1])
        mine = ours(health, self.state.root, recipe)
        settled = rec.get("hupAt") is None or now - float(rec["hupAt"]) >= HUP_SETTLE_S
        changes: list[Change] = []
        if mine and health.get("version") == want and settled:
            self._checked[recipe] = now
            served = list(cfg.upstreams)
            if rec.get("announced") != job.id:  # its first confirmed answer: started (again)
                again = bool(rec.get("announced"))
                rec.update(announced=job.id, restarts=int(rec.get("restarts") or 0) + int(again))
                changes.append(Change("GatewayRestarted" if again else "GatewayStarted", recipe,
                                      f"gateway job {job.id} on {job.node} serves http://{rec['host']}:{rec['port']} -> "
                                      f"{', '.join(served) or 'no Ready frontend (503)'}"))
            else:
                how = " (none alive: where the frontends are relaunched)" if cfg.unproven else ""
                changes.append(Change("GatewayReloaded", recipe, f"upstreams now {', '.join(served) or 'none'}{how}"))
            if rec.get("confirmedJob") != job.id:  # a new job: probed from its first answer on
                rec.update(answering=None, probeFailures=0, probeError=None)
            self._write(recipe, {**rec, "confirmed": want, "confirmedJob": job.id, "servedPort": rec["port"],
                                 "upstreams": served, "unproven": cfg.unproven, "lastError": None, "notBefore": None,
                                 "overdueSaid": None, "wantedSince": None})
            return changes
        if mine and health.get("version") != want and (
                rec.get("hupFor") != want or now - float(rec.get("hupAt") or 0) >= LOOK_LATER_S):
            # nginx answers with another config: reload it (again, if a HUP seems lost)
            self.driver.slurm(["scancel", "--batch", "--signal=HUP", job.id], check=False, verb="scancel-hup")
            # what it serves after the reload is the file as it is then: nothing confirmed until asked
            rec.update(hupFor=want, hupAt=now, confirmed=None)
        rec, moved = self._port_taken(recipe, rec, job, ports, now, foreign=health is not None and not mine)
        if moved:
            self._write(recipe, {**rec, "notBefore": now + LOOK_SOON_S})
            return moved
        overdue = confirm_overdue(now - since)
        if overdue and rec.get("overdueSaid") != want:
            agent = self._agent(recipe, job)
            why = rec.get("portError") or (
                f"gateway job {job.id} on {job.node} does not serve its config {now - since:.0f}s after it was written"
                + (f": nginx exited {agent['lastExit']}: {agent.get('error')}" if agent.get("lastExit") is not None
                   else "") + f" (see job.out and error.log in {prefix_of(self.state.root, recipe)})")
            changes.append(Change("GatewayFailed", recipe, why))
            rec.update(lastError=why, overdueSaid=want)
        self._write(recipe, {**rec, "notBefore": now + look_again_in(overdue)})
        return changes

    def _settled(self, recipe: str, rec: dict, now: float) -> list[Change]:
        up = {**rec, "lastError": None, "notBefore": None}
        if up.get("backoff"):  # stayed up: the next end resubmits at once again
            up["backoff"] = backoff_after(up["backoff"], now - float(rec.get("runningSince") or now))
        if up != self._record(recipe):
            self._write(recipe, up)
        return []

    def _port_taken(self, recipe: str, rec: dict, job: Job, ports: NodePortAllocator, now: float,
                    foreign: bool) -> tuple[dict, list[Change]]:
        """Another process holds the job's port on the node: its nginx could not bind it (the
        agent says so), or another gateway answers there (``foreign``: two reconcilers sharing a
        gateway node start from the same port). A gateway that never served there takes a new
        port in a new job; one that did keeps its address, as a gateway next to the reconciler
        does, and the cause is what its GatewayFailed says."""
        agent = self._agent(recipe, job)
        if not (foreign or agent.get("bindFailed")):
            return ({k: v for k, v in rec.items() if k != "portError"} if rec.get("portError") else rec), []
        port, node = rec["port"], rec["host"]
        if rec.get("servedPort") == port:
            why = (f"port {port} on {node} is held by another process; the endpoint keeps its address, so the "
                   f"gateway waits for the port (free it, or remove {record_path(self.state.root, recipe)} to take a new one)")
            return {**rec, "portError": why}, []
        if not self._retire(recipe, job):  # its holder was started with the old port: a new job, with both right
            return rec, []  # not told to stop (scancel failed): the same next pass, no port given up for it
        owner = f"{recipe}/{OWNER_NAME}"
        ports.release_key(node, owner, "http")
        ports.block(node, port, now + PORT_BLOCK_S)
        new = ports.allocate(node, owner, "http")
        why = (f"port {port} on {node} is held by another process; the gateway takes port {new} (it never served "
               f"on {port}) in a new job")
        return ({**rec, "port": new, "wantedSince": None, "lastError": None, "job": None, "jobState": None},
                [Change("GatewayMoved", recipe, why)])

    def _submit(self, recipe: str, rec: dict, prefix: Path, place: Placement, now: float) -> list[Change]:
        changes = []
        if rec.get("job") and rec.get("exitedAt") is None:  # the job we knew is not in the queue
            end = self.driver.job_end(rec["job"])
            seen = self._seen.setdefault(recipe, now)
            if (end is not None and end[0] in ALIVE) or (end is None and now - seen < MISSING_S):
                # squeue did not list it and Slurm still has it (or cannot say yet): not resubmitted
                self._write(recipe, {**rec, "notBefore": now + LOOK_LATER_S})
                return []
            how = f" ({end[0]}{', ' + end[1] if end and end[1] and end[1] != 'None' else ''})" if end else ""
            backoff = int(rec.get("backoff") or 0)
            rec = {**rec, "exitedAt": now, "jobState": None, "confirmedJob": None, "backoff": backoff + 1,
                   "notBefore": now + resubmit_delay(backoff)}
            why = f"gateway job {rec['job']} ended{how}; a new one is submitted on {place.node}"
            changes.append(Change("GatewayFailed", recipe, why))
            self._write(recipe, {**rec, "lastError": why})
        if rec.get("notBefore") and now < rec["notBefore"]:
            return changes
        script = prefix / "gateway.sbatch"
        # its hold is read from hold.json for every request; the argv's is only the fallback
        hold_argv = holder_supervisor.argv(self.python, recipe, rec["holderPort"], rec["port"], DEFAULT_HOLD_S, prefix)
        atomic_write_text(script, batch_script(self.python, self.nginx, prefix, hold_argv))
        name = labels.gateway_job_name(self.driver.owner, recipe)
        try:
            out = self.driver.slurm(sbatch_argv(name, place, script, prefix / "job.out"), verb="sbatch").stdout
        except DriverError as e:
            backoff = int(rec.get("backoff") or 0)
            why = f"the gateway's job was not submitted: {e}"
            self._write(recipe, {**rec, "lastError": why, "backoff": backoff + 1,
                                 "notBefore": now + max(LOOK_LATER_S, resubmit_delay(backoff + 1))})
            return changes + ([] if rec.get("lastError") == why else [Change("GatewayFailed", recipe, why)])
        job = out.strip().split(";", 1)[0]
        if job in (retired := self._retired(recipe)):  # Slurm's ids came round again: this one is ours
            self.state.write_json(prefix / RETIRED, [j for j in retired if j != job])
        self._write(recipe, {**rec, "job": job, "jobState": "PENDING", "submittedAt": now, "exitedAt": None,
                             "lastError": f"gateway job {job} submitted on {place.node}", "notBefore": now + LOOK_SOON_S})
        return changes + [Change("GatewaySubmitted", recipe, f"gateway job {job} submitted on {place.node}"
                                 + (f" (partition {place.partition})" if place.partition else ""))]

    # ---------------------------------------------------------------- address
    def _address(self, recipe: str, node: str, ports: NodePortAllocator, now: float) -> tuple[dict, list[Change]]:
        """The record, with the gateway's and its holder's ports on ``node``: allocated the first
        time, held in the registry ever after (no worker placed there is given them). A port the
        registry gives another owner (a registry rebuilt without it) is taken anew if the
        gateway never served on it, else said."""
        rec = self._record(recipe)
        owner = f"{recipe}/{OWNER_NAME}"
        if rec.get("mode") == "job" and rec.get("host") == node and isinstance(rec.get("port"), int) \
                and isinstance(rec.get("holderPort"), int):
            held = [ports.claim(node, owner, "http", rec["port"]), ports.claim(node, owner, holder_supervisor.NAME, rec["holderPort"])]
            if all(held) or rec.get("servedPort") == rec["port"]:
                return rec, []  # a served address stays; a worker given its port cannot bind it and moves
            if rec.get("job") and not self._retire(recipe, Job(rec["job"], rec.get("jobState") or "RUNNING", node, "")):
                return rec, []  # its job, started with these ports, not told to stop: tried again next pass
            ports.release_node_owner(node, owner)
        changes = []
        if rec.get("job") and rec.get("mode") == "job":  # started with the ports it will not have
            changes.append(Change("GatewayMoved", recipe, f"the ports of gateway job {rec['job']} are another "
                                  "owner's in the port registry: new ports, in a new job"))
        port = ports.allocate(node, owner, "http")
        hport = ports.allocate(node, owner, holder_supervisor.NAME)
        rec = {**{k: v for k, v in rec.items() if k in KEPT}, "mode": "job", "host": node, "port": port,
               "holderPort": hport, "allocatedAt": now, "job": None, "jobState": None}
        self._write(recipe, rec)
        return rec, changes

    def stop(self, recipe: str, ports: NodePortAllocator) -> list[Change]:
        """The recipe is gone (or its gateway moves): nginx stops once its requests finish (QUIT to
        the agent, which ends the job), the ports are released. A job that could not be told is
        kept in the record, and told again at the next pass."""
        rec = self._record(recipe)
        if self.driver is not None:
            listed = self._find(recipe)
            if rec.get("job") and rec["job"] not in {j.id for j in listed}:  # squeue may miss it: told anyway
                listed.append(Job(rec["job"], rec.get("jobState") or "RUNNING", "", ""))
            told = [self._retire(recipe, j) for j in listed]
            if not all(told):
                return self._failed(recipe, f"gateway job of {recipe} could not be stopped (scancel failed); "
                                          "tried again next pass")
        holder_supervisor.say_nothing_comes(prefix_of(self.state.root, recipe), holder_supervisor.DELETED)
        ports.release(f"{recipe}/{OWNER_NAME}")
        path = record_path(self.state.root, recipe)
        if not path.exists():
            return []
        path.unlink()
        return [Change("GatewayStopped", recipe, f"gateway job {rec.get('job')} on {rec.get('host')} stops once its "
                       "requests finish")]

    # ---------------------------------------------------------------- helpers
    def _find(self, recipe: str) -> list[Job]:
        """The recipe's gateway jobs in the queue (every partition: -a), but those retired: a job
        told to QUIT carries its last requests to their end under the same name, and is never
        adopted again."""
        name = labels.gateway_job_name(self.driver.owner, recipe)
        r = self.driver.slurm(["squeue", "-a", "-h", "-u", self.driver.user, f"--name={name}", "-o", "%i|%T|%N|%r"],
                              verb="squeue-gateway")
        retired = set(self._retired(recipe))
        return [j for j in parse_jobs(r.stdout) if j.id not in retired]

    def _retire(self, recipe: str, job: Job) -> bool:
        """End ``job``: a running one gracefully (QUIT to the agent: nginx finishes what it carries),
        a waiting one at once. Told, it is never taken for the gateway's job again; whether it was."""
        argv = ["scancel", "--batch", "--signal=QUIT", job.id] if job.state in RUNNING else ["scancel", job.id]
        r = self.driver.slurm(argv, check=False, verb="scancel-quit" if job.state in RUNNING else "scancel")
        if r.returncode != 0 and not any(w in (r.stderr or "") for w in RETIRED_GONE):
            log.error("gateway job not stopped", recipe=recipe, job=job.id, error=(r.stderr or "").strip())
            return False
        prefix = prefix_of(self.state.root, recipe)
        prefix.mkdir(parents=True, exist_ok=True)
        self.state.write_json(prefix / RETIRED, [*self._retired(recipe), job.id][-KEEP_RETIRED:])
        return True

    def _retired(self, recipe: str) -> list[str]:
        got = self.state.read_json(prefix_of(self.state.root, recipe) / RETIRED, [], lambda d: isinstance(d, list))
        return [str(j) for j in got]

    def _agent(self, recipe: str, job: Job) -> dict:
        """The agent's own status (gateway/agent.py), if it is this job's."""
        got = self.state.read_json(prefix_of(self.state.root, recipe) / "agent.json", {}, lambda d: isinstance(d, dict))
        return got if str(got.get("job")) == job.id else {}

    def _health(self, rec: dict) -> dict | None:
        return health_page(rec["host"], rec["port"], HEALTH_TIMEOUT_S)


KEPT = ("restarts", "backoff", "announced")  # a new address keeps the gateway's history


