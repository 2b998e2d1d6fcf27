"""What plan() decides, as named sets per recipe (in the style of Nomad's reconcile results).

Nothing here is free text that a caller must parse: every stop has a reason from
``StopReason``, every unit that is not moving has a ``WaitReason``, every launch a
``PlaceReason``. ``describe()`` renders them for people; logs, events and status are
built from the fields.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum

from reconciler.recipe.namespaces import display as shown  # people read FOLDER/NAME, never the key
from reconciler.world import Launch, Unit
from reconciler.world import AllocSpec


class StopReason(str, Enum):
    """Why a step is cancelled. ``on_purpose``: its relaunch skips the restart policy."""

    RECIPE_DELETED = "recipe deleted"
    SCALED_DOWN = "scaled down"
    FRONTEND_UNMANAGED = "frontend no longer managed"
    SERVICE_UNMANAGED = "service no longer declared"
    RANK_LOST = "a rank died: relaunching the whole worker"
    DUPLICATE = "duplicate step"
    FATAL_LOG = "fatal log line"
    LIVENESS = "liveness probes failed"
    STARTUP_TIMEOUT = "not Ready within the startup grace"
    SPEC_CHANGED = "spec changed: replacing"
    SUPERSEDED = "its successor is Ready and routed: the old life stops"
    # a service it reads (etcd, NATS, the Mooncake master, a gms...) has a new life: the unit's
    # registrations went with the old one, so it is relaunched at once (core/plan/dependents.py)
    DEPENDENCY_RESTARTED = "a service it depends on has a new life"
    ANALYSIS_FAILED = "rollout analysis failed: the new life stops, the old one keeps serving"

    @property
    def on_purpose(self) -> bool:
        return self in (StopReason.SPEC_CHANGED, StopReason.SUPERSEDED, StopReason.DEPENDENCY_RESTARTED,
                        StopReason.ANALYSIS_FAILED)

    @property
    def ends_unit(self) -> bool:
        """Whether the unit itself stops (not only an old life of it, while the new one runs)."""
        return self is not StopReason.SUPERSEDED


class PlaceReason(str, Enum):
    """Why a unit is launched; only ``RELAUNCH`` counts as a restart."""

    NEW = "missing"  # never launched (first deploy, scale up)
    RELAUNCH = "relaunch after its last life ended"
    REPLACEMENT = "replacing"  # we stopped it on purpose (rollout)

    @property
    def restart(self) -> bool:
        return self is PlaceReason.RELAUNCH


class WaitReason(str, Enum):
    """Why a desired unit is neither running as wanted nor being acted on now."""

    ALLOCATION_PENDING = "its allocation is not running yet"
    BACKOFF = "restart backoff"
    GAVE_UP = "will not be restarted (restart policy)"
    ROLLOUT_BUDGET = "waits to be replaced: too many workers unavailable"
    NEEDS_READY_WORKER = "the frontend waits for a Ready worker"
    NEEDS_SERVICES = "waits for the services of an earlier start phase to be Ready"
    NEEDS_READY_FRONTEND = "an after_frontend service waits for the frontend to be Ready"
    UNPLACEABLE = "its nodes straddle an existing allocation"
    # the file packs more on its node than its job holds: a successor sized for it is submitted
    RESIZING = "waits for an allocation that holds its GPUs"
    TERMINATING = "its old step is still shutting down"
    # the file asked for fewer workers: the victim is out of the routers and finishes what it
    # carries (rollout.pickup_seconds + drain_seconds from the edit) before it is stopped
    DRAINING = "scaled down: out of the routers, it finishes its requests, then stops"
    SURGE_STARTING = "its new life starts beside the old one"
    SURGE_HANDOVER = "its new life is Ready: the old one leaves the routers, then stops"
    SURGE_ALLOCATION = "waits for a surge allocation: its allocation has no GPUs for a second life"
    ACTION_BACKOFF = "an action failed: the recipe backs off"
    # a run-once unit (a benchmark): it ran to its end and is not restarted; it runs again only on
    # its policy's triggers (a changed spec, its period): core/plan/relaunch.py:once_gate
    FINISHED = "ran once to its end: not restarted"
    NEEDS_SETTLED = "a run-once unit waits for every unit to run the current spec and be Ready"
    # reconcile.rollout.analysis (core/plan/analysis.py): measured before it is routed; failed: not retried
    ANALYSING = "rollout analysis: a life is measured before the new one takes requests"
    ROLLOUT_FAILED = "rollout analysis failed: the old life keeps serving; a changed recipe is tried again"


class RecipeState(str, Enum):
    """What plan() does with a recipe as a whole."""

    CONVERGE = "converge"
    TEARDOWN = "teardown"  # deleted: everything it owns goes
    SUSPENDED = "suspended"  # reconcile.suspend or `reconciler suspend`: no actions, what runs keeps running
    HELD = "held"  # desired state cannot be computed: nothing is touched
    PRUNE_REFUSED = "prune refused"  # every manifest vanished at once: nothing is touched


@dataclass(frozen=True)
class SubmitAlloc:
    spec: AllocSpec
    handover: str = ""  # a successor before the time limit: why (else: the index has no job)

    @property
    def recipe(self) -> str:
        return self.spec.recipe

    def describe(self) -> str:
        s = self.spec
        why = self.handover or f"needed for {_names(s.workers) if s.workers else f'nodes {s.start}-{s.start + s.count - 1}'}"
        return f"submit allocation {shown(s.recipe)}/a{s.index}: {s.count} node(s) x {s.gpus_per_node} GPU(s) ({why})"


def _names(workers: tuple[str, ...], shown: int = 3) -> str:
    more = len(workers) - shown
    return ", ".join(workers[:shown]) + (f" and {more} more" if more > 0 else "")


@dataclass(frozen=True)
class CancelAlloc:
    job_id: str
    recipe: str
    index: int
    reason: StopReason | None = None  # None: no desired worker needs it any more

    def describe(self) -> str:
        why = self.reason.value if self.reason else "no longer needed"
        return f"cancel allocation {shown(self.recipe)}/a{self.index} job {self.job_id} ({why})"


@dataclass(frozen=True)
class LaunchStep:
    unit: Unit
    launch: Launch
    job_id: str
    reason: PlaceReason
    restart: int = 0  # the restart this launch is (1, 2, ...); 0 when it is not one

    @property
    def recipe(self) -> str:
        return self.unit.recipe

    def describe(self) -> str:
        u = self.unit
        rank = f" rank {self.launch.rank}" if len(u.launches) > 1 else ""
        why = f"restart {self.restart}" if self.restart else self.reason.value
        return (f"launch {shown(u.recipe)}/{u.name}{rank} on {','.join(self.launch.nodes)} in job {self.job_id}"
                f" spec {u.spec_hash} ({why})")


@dataclass(frozen=True)
class CancelStep:
    step_id: str
    recipe: str
    unit: str
    reason: StopReason
    detail: str = ""  # the data behind the reason (a log line, a probe count), for people

    @property
    def replace(self) -> bool:
        return self.reason.on_purpose

    def describe(self) -> str:
        why = f"{self.reason.value}: {self.detail}" if self.detail else self.reason.value
        return f"cancel step {self.step_id} ({shown(self.recipe)}/{self.unit}: {why})"


Action = SubmitAlloc | LaunchStep | CancelStep | CancelAlloc


@dataclass(frozen=True)
class Wait:
    reason: WaitReason
    detail: str = ""
    until: float | None = None  # when it would move on its own (backoff end), if known

    def describe(self) -> str:
        return f"{self.reason.value} ({self.detail})" if self.detail else self.reason.value


@dataclass(frozen=True)
class Measure:
    """A life to measure for the rollout analysis (shell/gates/analysis_runs.py runs it, one at a time per recipe)."""

    recipe: str
    role: str
    index: int
    spec: str  # the spec hash of the life measured: its runs are kept under it
    against: str  # the old spec a new life is compared with (an old life: its own spec)
    url: str  # the life's own address, never a router's or the gateway's
    life: str  # "new" | "old"
    generation: str = ""  # the recipe's generation it is measured for: a failure holds until the recipe changes

    @property
    def unit(self) -> str:
        return f"{self.role}_{self.index}"


@dataclass(frozen=True)
class RoleCounts:
    desired: int = 0
    running: int = 0  # has a live step (any spec)
    ready: int = 0  # probe answers
    unavailable: int = 0  # desired but not ready (waiting, starting, backing off, being replaced)


@dataclass(frozen=True)
class RecipePlan:
    name: str
    state: RecipeState = RecipeState.CONVERGE
    submit: tuple[SubmitAlloc, ...] = ()
    release: tuple[CancelAlloc, ...] = ()
    place: tuple[LaunchStep, ...] = ()
    stop: tuple[CancelStep, ...] = ()
    replace: tuple[CancelStep, ...] = ()  # rollout: the old step goes now, its successor once it is gone
    relaunch_later: Mapping[str, float] = field(default_factory=dict)  # unit name -> retry at
    waiting: Mapping[str, Wait] = field(default_factory=dict)  # unit name -> why it does not move
    counts: Mapping[str, RoleCounts] = field(default_factory=dict)  # role -> counts
    reset_backoff: tuple[str, ...] = ()  # units healthy long enough: their backoff starts from scratch
    detail: str = ""  # for HELD / PRUNE_REFUSED: why
    deferred: tuple[Action, ...] = ()  # what would be done now, held back (action-error backoff, prune guard)
    deferred_until: float | None = None
    measure: tuple[Measure, ...] = ()  # rollout analysis: lives to measure, in order (not actions)

    @property
    def actions(self) -> tuple[Action, ...]:
        """In execution order: steps go before allocations, then submits, then launches."""
        return self.stop + self.replace + self.release + self.submit + self.place

    def describe_waiting(self) -> list[str]:
        out = [f"{shown(self.name)}: {u} {w.describe()}" for u, w in sorted(self.waiting.items())]
        if self.state is RecipeState.PRUNE_REFUSED:
            out.insert(0, f"refusing to prune {shown(self.name)}: {self.detail}")
        elif self.state is RecipeState.HELD:
            out.insert(0, f"{shown(self.name)}: left as it is, its desired state cannot be computed: {self.detail}")
        if self.deferred and self.state is not RecipeState.PRUNE_REFUSED:
            out.insert(0, f"{shown(self.name)}: {WaitReason.ACTION_BACKOFF.value}: {len(self.deferred)} action(s) deferred")
        return out


@dataclass(frozen=True)
class Plan:
    recipes: Mapping[str, RecipePlan] = field(default_factory=dict)
    requeue_after: float | None = None  # seconds until anything would change on its own; None: nothing will
    refused_prune: bool = False

    @property
    def actions(self) -> tuple[Action, ...]:
        acts = [a for name in sorted(self.recipes) for a in self.recipes[name].actions]
        # every recipe's cancels first, across recipes: freed ports and GPUs are free for the launches
        rank = {CancelStep: 0, CancelAlloc: 1, SubmitAlloc: 2, LaunchStep: 3}
        return tuple(sorted(acts, key=lambda a: rank[type(a)]))

    def __bool__(self) -> bool:
        return any(r.actions for r in self.recipes.values())

    def for_recipe(self, name: str) -> tuple[Action, ...]:
        r = self.recipes.get(name)
        return r.actions if r else ()

    def waiting_lines(self) -> list[str]:
        return [line for name in sorted(self.recipes) for line in self.recipes[name].describe_waiting()]
