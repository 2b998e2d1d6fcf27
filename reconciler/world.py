"""What the reconciler sees (Observed) and wants (Desired): plain frozen data, defined once.

A ``Unit`` is what runs: one logical worker, service instance or frontend (the thing that is
scaled, relaunched and rolled), with one or more ``Launch``es (srun steps). ``plan`` is a pure
function of ``Desired`` and ``Observed`` plus the time; the drivers fill ``Observed``, the
desired-state pipeline (``reconciler.desired``) fills ``Desired``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any
from collections.abc import Mapping


FRONTEND = "frontend"
SERVICE_PREFIX = "svc-"  # the step role of a service: svc-<name>


def is_service_role(role: str) -> bool:
    return role.startswith(SERVICE_PREFIX)


@dataclass(frozen=True)
class Launch:
    """One srun step."""

    rank: int  # node rank within the unit (0 for MPI launches)
    nodes: tuple[str, ...]
    ntasks: int
    mpi: str | None
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    gpus: tuple[int, ...] = ()
    visible_env: str = ""  # the env var of logical GPU indices: the step maps them (drivers/base.LAUNCHER)


@dataclass(frozen=True)
class Unit:
    recipe: str
    role: str  # prefill | decode | agg | frontend
    index: int
    ordinals: tuple[int, ...]  # logical node ordinals of the recipe
    nodes: tuple[str, ...]  # hostnames, leader first
    gpus: tuple[int, ...]
    ports: Mapping[str, int]
    launches: tuple[Launch, ...]
    container: str | None
    files: Mapping[str, str] = field(default_factory=dict)
    health_port: int | None = None
    health_path: str = "/health"
    metrics_path: str | None = None  # Prometheus metrics on the health port (None: the unit serves none)
    fatal_patterns: tuple[str, ...] = ()
    srun_options: tuple[tuple[str, str], ...] = ()
    spec_hash: str = ""
    # how Ready is told: http (GET health_path is 200), dynamo (a Dynamo system server whose
    # endpoints are all ready), tcp (the port accepts), log (a line matches probe_arg),
    # file (probe_arg exists, non-empty), started (running is enough)
    probe: str = "http"
    probe_arg: str = ""
    phase: str = ""  # services only: infra | before_workers | with_workers | after_frontend
    startup_timeout: float | None = None  # None: the recipe's startup grace
    probe_interval: float = 0.0  # services: seconds between probes (readiness.interval_seconds); 0: every pass
    critical: bool = False
    worker_api: str = ""  # a frontend whose worker set the shell keeps in step with readiness: "sglang-router"
    scheme: str = "http"  # how a router reaches it: http, or grpc (Backend.is_grpc_mode)
    slot: int = 0  # which of its two life slots (ports, log files): a surge life takes the other one
    # a frontend: the served model name its readiness canary asks for (listed by /v1/models, and a
    # one-token completion through it answers); "" for every other unit
    canary: str = ""
    shares_port: bool = False  # a frontend whose two lives can listen on one port (the built-in router)
    # units that must be Ready before this one starts (a failover engine: its worker's gms instance)
    needs: tuple[tuple[str, int], ...] = ()
    # runs once to its end (a benchmark): never restarted, started only on a settled recipe, kept out
    # of the recipe's Ready / Degraded and counts; its restart policy is "once" (core/plan/relaunch.py)
    run_once: bool = False
    # a run-once unit's own definition (a benchmark's plan and target, not what it measures): a new
    # one runs whatever the policy says about rollouts
    run_key: str = ""

    @property
    def is_service(self) -> bool:
        return bool(self.phase)

    @property
    def name(self) -> str:
        return f"{self.role}_{self.index}"

    @property
    def life(self) -> str:
        return life_name(self.name, self.slot)

    @property
    def port_owner(self) -> str:
        """Who holds its ports in the registry: its life (a worker's lives have ports of their own),
        or its name when its lives share one address (the built-in router)."""
        return f"{self.recipe}/{self.name if self.shares_port else self.life}"

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.recipe, self.role, self.index)

    @property
    def url(self) -> str | None:
        return f"{self.scheme}://{self.nodes[0]}:{self.health_port}" if self.health_port else None


def life_name(unit: str, slot: int) -> str:
    """A unit has two life slots, so that a surge life can run beside the old one: slot 0 is the
    unit's own name (as before slots existed), slot 1 ``<name>@b``. Its ports are owned by
    ``<recipe>/<life>``, and its logs and exit records are ``logs/<life>.<rank>.*``."""
    return f"{unit}@b" if slot else unit


LIVE_JOB_STATES = frozenset({"PENDING", "CONFIGURING", "RUNNING", "SUSPENDED", "REQUEUED", "RESIZING"})


@dataclass(frozen=True)
class Alloc:
    """One of our Slurm jobs (an allocation) as observed."""

    job_id: str
    recipe: str
    index: int
    start: int  # first node ordinal of the recipe it holds
    count: int
    state: str  # PENDING, RUNNING, COMPLETING, ...
    reason: str = ""
    nodes: tuple[str, ...] = ()
    time_left: str = ""  # squeue's TimeLeft (UNLIMITED, 29:58, 1-00:00:00), read each tick: the hand-over's clock
    submitted: float | None = None  # squeue's SubmitTime (epoch): how long a pending one has waited
    time_limit: str = ""  # squeue's TimeLimit: the limit Slurm granted (with --time-min, maybe less than asked)
    gpus: int | None = None  # GPUs per node it holds (its label); None: not known, taken to hold what it covers
    packed: tuple[tuple[str, int], ...] | None = None  # (role, workers) it was packed for (label; desired/baseline.py)

    @property
    def running(self) -> bool:
        return self.state == "RUNNING" and len(self.nodes) >= self.count

    @property
    def live(self) -> bool:
        return self.state in LIVE_JOB_STATES

    def covers(self, ordinals: tuple[int, ...]) -> bool:
        return all(self.start <= o < self.start + self.count for o in ordinals)


@dataclass(frozen=True)
class Step:
    """One of our job steps (a worker process) as observed."""

    step_id: str  # "<job>.<step>"
    recipe: str
    role: str
    index: int
    rank: int
    spec_hash: str
    nodes: tuple[str, ...] = ()
    pending: bool = False  # launched by us but not yet visible in squeue
    terminating: bool = False  # we cancelled it moments ago; it is still shutting down
    slot: int = 0  # the unit's life slot: a surge life runs beside the old one in the other slot

    @property
    def life(self) -> str:
        """The life's name: its log and exit files and its port owner (``world.life_name``)."""
        return life_name(f"{self.role}_{self.index}", self.slot)

    @property
    def cancellable(self) -> bool:
        return not (self.pending or self.terminating)

    @cached_property  # asked of every step several times per build and plan: split once
    def job_id(self) -> str:
        return self.step_id.split(".", 1)[0]

    @property
    def unit_key(self) -> tuple[str, str, int]:
        return (self.recipe, self.role, self.index)


@dataclass(frozen=True)
class UnitHealth:
    """What the reconciler knows about one worker's lives, beyond squeue."""

    launches: int = 0  # lives started so far
    restarts: int = 0  # the backoff counter: relaunches since the worker was last healthy for a while
    last_launch: float | None = None  # when the current (or last) life was launched
    last_exit: tuple[int, float] | None = None  # (exit code, time) of the last life that ended
    missing_since: float | None = None  # first time it was seen without a step (when no exit record)
    stopped_for: str | None = None  # the StopReason value of the last stop we issued in this life
    was_ready: bool = False  # Ready at least once in this life
    ready_since: float | None = None  # start of the current unbroken run of Ready probes
    first_ready: float | None = None  # the first Ready probe of this life (seen by this process)
    probe_failures: int = 0  # consecutive failed probes since it was last Ready
    failing_since: float | None = None  # the first of those failed probes (None: none, or not known)
    fatal: str | None = None  # a line of this life's log matching a fatal pattern
    watched_since: float | None = None  # when this reconciler process first probed it (after a restart)
    ready_after: float | None = None  # seconds this life took from launch to Ready (state/, when seen)
    took: float | None = None  # the same, of this life or the last one that was seen through (hand-over time)
    last_spec: str | None = None  # the spec hash of the life launched last (a run-once unit: what last ran)
    last_run_key: str | None = None  # a run-once unit's Unit.run_key at that launch

    @property
    def grace_from(self) -> float | None:
        """Start of the startup grace: the launch, or our own start if we adopted it later."""
        if self.last_launch is None:
            return self.watched_since
        return max(self.last_launch, self.watched_since or self.last_launch)

    def ended(self, now: float) -> tuple[int | None, float]:
        """Exit code (None when unknown, e.g. SIGKILL) and time of the life that ended."""
        if self.last_exit and (self.last_launch is None or self.last_exit[1] >= self.last_launch - 1):
            return self.last_exit
        return None, self.missing_since or now


@dataclass(frozen=True)
class ActionFailures:
    """A recipe's actions failed ``count`` times in a row, the last at ``last_at``; ``reason`` and
    ``message``: what the deployment's REASON shows for the last failure (a submission Slurm refused)."""

    count: int
    last_at: float
    reason: str = ""
    message: str = ""


@dataclass(frozen=True)
class InFlight:
    """A launch we made that squeue does not show yet."""

    step: Step  # a pseudo step (pending=True) standing in for it
    launched_at: float
    exited: int | None = None  # the launcher's exit code when it ended before the step showed up


@dataclass(frozen=True)
class Observed:
    allocs: tuple[Alloc, ...] = ()
    steps: tuple[Step, ...] = ()
    ready: Mapping[tuple[str, str, int], bool] = field(default_factory=dict)  # unit key -> health probe ok
    health: Mapping[tuple[str, str, int], UnitHealth] = field(default_factory=dict)
    action_failures: Mapping[str, ActionFailures] = field(default_factory=dict)  # recipe -> its failed actions
    previous_ready: Mapping[tuple[str, str, int], bool] = field(default_factory=dict)  # unit key -> its old life's probe
    # job id -> (when the job must be gone, why) before its time limit: a reservation over its nodes,
    # its node quarantined (shell/cluster/slurm_watch.py); the hand-over counts it as the job's end
    deadlines: Mapping[str, tuple[float, str]] = field(default_factory=dict)
    # job id -> core.plan.pending.PendingInfo: Slurm's reason and expected start of a pending allocation
    pending: Mapping[str, Any] = field(default_factory=dict)
    # unit key -> why a unit whose health probe passes is not Ready (a frontend's canary failed)
    why: Mapping[tuple[str, str, int], str] = field(default_factory=dict)
    # unit key -> failed probes in a row of its old life (a surging worker's) since that life was
    # Ready: one slow /health answer must not take the old life out of the routers (0: Ready now, or never)
    previous_failures: Mapping[tuple[str, str, int], int] = field(default_factory=dict)
    # (recipe, role, spec hash) -> the finished rollout-analysis runs of lives of that spec (shell/gates/analysis_runs.py)
    analysis: Mapping[tuple[str, str, str], tuple[Mapping[str, Any], ...]] = field(default_factory=dict)

    @cached_property
    def _index(self) -> dict[str, tuple[list[Alloc], list[Step]]]:
        # built once: per-recipe lookups must not scan the whole cluster (plan is O(objects))
        idx: dict[str, tuple[list[Alloc], list[Step]]] = {}
        for a in self.allocs:
            idx.setdefault(a.recipe, ([], []))[0].append(a)
        for s in self.steps:
            idx.setdefault(s.recipe, ([], []))[1].append(s)
        return idx

    def allocs_of(self, recipe: str) -> list[Alloc]:
        return list(self._index.get(recipe, ((), ()))[0])

    def steps_of(self, recipe: str) -> list[Step]:
        return list(self._index.get(recipe, ((), ()))[1])

    def recipes(self) -> set[str]:
        return set(self._index)


@dataclass(frozen=True)
class AllocSpec:
    """An allocation a recipe needs: node ordinals [start, start+count)."""

    recipe: str
    index: int
    start: int
    count: int
    gpus_per_node: int
    partition: str | None = None
    account: str | None = None
    time_limit: str | None = None
    directives: tuple[tuple[str, str], ...] = ()
    exclude: tuple[str, ...] = ()  # suspect, quarantined, reserved nodes: the executor sets them at submit
    time_min: str | None = None  # sbatch --time-min (slurm.time_min)
    reservation: str | None = None  # sbatch --reservation (slurm.reservation)
    packed: tuple[tuple[str, int], ...] = ()  # (role, workers) its ordinals are packed for (desired/baseline.py)
    # the workers a new allocation is submitted for (what its events name; logical ordinals are internal)
    workers: tuple[str, ...] = field(default=(), compare=False)


@dataclass(frozen=True)
class RestartPolicy:
    policy: str = "always"  # never | on-failure | always | once (a run-once unit: see core/plan/relaunch.py)
    max_restarts: int | None = None
    backoff_seconds: float = 10.0
    max_backoff_seconds: float = 300.0
    reset_after_seconds: float = 600.0
    every_seconds: float | None = None  # once: run again this long after the last run ended
    on_change: bool = False  # once: run again when the unit's spec changed since the last run

    def delay(self, restarts: int) -> float:
        """The wait before a relaunch, ``restarts`` relaunches into a run of failures (kubelet-style):
        the first is immediate, then ``backoff_seconds`` doubling up to ``max_backoff_seconds``;
        counted from the moment the life ended (its exit record), not from when it was noticed."""
        if restarts <= 0:
            return 0.0
        return min(self.backoff_seconds * (2 ** min(restarts - 1, 30)), self.max_backoff_seconds)


@dataclass(frozen=True)
class Analysis:
    """reconcile.rollout.analysis, resolved: the runner's plan (``reconciler.benchrun --plan``) and the bars."""

    plan: str
    max_ttft_p90_ms: float | None = None
    min_throughput_ratio: float | None = None


@dataclass(frozen=True)
class DesiredRecipe:
    name: str
    generation: str  # hash of the recipe spec: status observedGeneration
    allocs: tuple[AllocSpec, ...]  # every allocation the recipe needs
    keep_allocs: tuple[str, ...]  # job ids of observed allocations that serve the recipe
    units: tuple[Unit, ...]  # units placed on running allocations (concrete argv, ports, hash)
    waiting: tuple[tuple[str, int], ...]  # (role, index) of units whose allocation is not running yet
    frontend: Unit | None = None  # frontend_0
    extra_frontends: tuple[Unit, ...] = ()  # frontend_1.. (num_additional_frontends), behind the gateway
    suspended: bool = False
    max_unavailable: int = 1
    unplaceable: Mapping[str, str] = field(default_factory=dict)  # unit name -> why no allocation can hold it
    job_of: Mapping[tuple[str, int], str] = field(default_factory=dict)  # (role, index) -> job id holding it
    pending_reason: str = ""  # why an allocation is still pending (Slurm's reason)
    restart: Mapping[str, RestartPolicy] = field(default_factory=dict)  # role -> policy (frontend: default)
    startup_grace: float = 1800.0  # seconds a new life may take to become Ready
    liveness_failures: int = 3  # consecutive failed probes after Ready that mean "dead"
    liveness_seconds: float = 10.0  # ... once the first of them is at least this old
    services: tuple[Unit, ...] = ()  # service instances placed on the head allocation
    gates: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # phase -> roles Ready before later phases
    max_surge: int = 0  # extra lives per role during a rollout (reconcile.rollout.max_surge)
    # a surge life that is Ready stays beside the old one this long before the old leaves the
    # routers (they pick up new workers), then the old one drains this long before it is stopped
    surge_pickup_seconds: float = 2.0
    surge_drain_seconds: float = 3.0
    # (role, index) -> the old life a surge life replaces: its ports, URL and health port (the
    # unit in the old slot), so that it is probed and routed until the new one takes over
    previous: Mapping[tuple[str, int], Unit] = field(default_factory=dict)
    no_room: frozenset[str] = frozenset()  # would surge, but no GPUs for a second life there: rolled in place
    # allocation indices whose workers wait for a surge allocation (no_room, max_unavailable 0): a
    # successor is submitted for them and the workers move onto it with surge, like a hand-over
    surge_allocs: Mapping[int, tuple[tuple[str, int], ...]] = field(default_factory=dict)  # index -> its workers
    resize_allocs: Mapping[int, str] = field(default_factory=dict)  # index -> why its job is too small (a successor)
    undersized_allocs: frozenset[int] = frozenset()  # jobs too small for the file's packing: a successor is kept
    resizing: frozenset[str] = frozenset()  # workers that wait for that successor: never launched, rolled there
    handover_seconds: float | None = None  # reconcile.handover_seconds (None: from launch-to-Ready)
    time_limit_seconds: float | None = None  # the allocations' Slurm time limit, when there is one
    draining: frozenset[str] = frozenset()  # scale-down victims: out of the routers until drained (desired/scale.py)
    spares: frozenset[str] = frozenset()  # warm spares: running and Ready, out of the routers (core/plan/spares.py)
    analysis: Analysis | None = None  # a surge life is measured before it is routed (core/plan/analysis.py)
    min_available: int = 1  # reconcile.min_available: serving workers per role for Available (shell/status.py)
    served_model: str = ""  # the name clients send in a request's "model" (desired/runtime.py): get, describe, the page
    dependents: Mapping[tuple[str, int], tuple] | None = field(default=None, compare=False)  # core/plan/dependents

    def policy(self, role: str) -> RestartPolicy:
        return self.restart.get(role, RestartPolicy())

    @property
    def all_units(self) -> tuple[Unit, ...]:
        """The placed services, workers and the frontend (when there is one)."""
        return self.services + self.units + self.frontends

    @property
    def frontends(self) -> tuple[Unit, ...]:
        """Every frontend, frontend_0 first."""
        return ((self.frontend,) if self.frontend else ()) + self.extra_frontends

    @property
    def unit_keys(self) -> set[tuple[str, int]]:
        return {(u.role, u.index) for u in self.services + self.units} | set(self.waiting)


@dataclass(frozen=True)
class Desired:
    recipes: Mapping[str, DesiredRecipe] = field(default_factory=dict)
    manifests_seen: int = 0  # recipe files found (valid or not): the prune guard's input
    held: Mapping[str, str] = field(default_factory=dict)  # recipe -> why its desired state could not be built
    allow_empty: bool = False  # the user allows tearing everything down when every manifest is gone
    # `reconciler prune NAME` (state/<name>/prune.json): the operator confirmed tearing NAME down though
    # the prune guard holds it
    prune_confirmed: frozenset[str] = frozenset()
    # recipes the prune guard keeps running (their file is gone), built from their last applied spec
    # so that they are probed and shown (units, endpoint, model); plan() never converges them
    kept: Mapping[str, DesiredRecipe] = field(default_factory=dict)
