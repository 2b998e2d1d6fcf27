"""plan(desired, observed, now) -> actions. Pure: no I/O, no clock, no randomness.

Every policy of the reconciler is readable here, top to bottom:

1. Prune guard — when no manifest is left at all, refuse to tear anything down
   unless ``allow_empty`` (a mis-mounted directory must not wipe the cluster).
2. Teardown — a recipe that is gone (or suspended): cancel its steps, then its
   allocations.
3. Allocations — submit every allocation a recipe needs that is not live; cancel
   live ones it no longer needs (after their steps).
4. Scale — steps of workers beyond the desired indices are cancelled (the
   highest indices go, because desired indices are always 0..n-1); missing
   workers are launched at the lowest free indices, on their allocation.
5. Relaunch — a worker with no step is launched again in place: same nodes,
   same ports (ports are owned by the worker in the registry), subject to its
   role's restart policy (``restart_gate``): ``never``, ``on-failure`` (exit code
   0 is final), ``always``; ``max_restarts``; exponential backoff from the end of
   the last life. A worker we stopped on purpose (rollout) comes back at once.
   A multi-node worker missing a rank has its other ranks cancelled and comes
   back whole.
5b. Liveness — a running worker is stopped (and so relaunched by 5) when its log
   shows a fatal line, when ``liveness_failures`` probes in a row fail after it
   was Ready, or when it is not Ready within the startup grace.
6. Rollout — a worker whose step runs an older spec hash is replaced one at a
   time (``max_unavailable``): cancel now, launch on the next tick once the old
   step is gone (same ports!). A worker that is not Ready is replaced at once;
   a Ready one only while fewer than ``max_unavailable`` workers are unavailable.
7. Ordering — the frontend starts after at least one worker is Ready.
8. Ownership — only objects carrying our marker ever reach this function.
"""

from __future__ import annotations

from dataclasses import dataclass

from reconciler.units import FRONTEND, Launch, Unit
from reconciler.world import AllocSpec, Desired, DesiredRecipe, Observed, RestartPolicy, Step, UnitHealth

ROLE_ORDER = {"prefill": 0, "decode": 1, "agg": 2, FRONTEND: 3}


@dataclass(frozen=True)
class SubmitAlloc:
    spec: AllocSpec
    reason: str

    def describe(self) -> str:
        s = self.spec
        return f"submit allocation {s.recipe}/a{s.index}: {s.count} node(s) x {s.gpus_per_node} GPU(s) ({self.reason})"


@dataclass(frozen=True)
class LaunchStep:
    unit: Unit
    launch: Launch
    job_id: str
    reason: str

    def describe(self) -> str:
        u = self.unit
        rank = f" rank {self.launch.rank}" if len(u.launches) > 1 else ""
        return (f"launch {u.recipe}/{u.name}{rank} on {','.join(self.launch.nodes)} in job {self.job_id}"
                f" spec {u.spec_hash} ({self.reason})")


@dataclass(frozen=True)
class CancelStep:
    step_id: str
    recipe: str
    unit: str
    reason: str
    replace: bool = False  # stopped on purpose to be replaced: its relaunch skips the restart policy

    def describe(self) -> str:
        return f"cancel step {self.step_id} ({self.recipe}/{self.unit}: {self.reason})"


@dataclass(frozen=True)
class CancelAlloc:
    job_id: str
    recipe: str
    index: int
    reason: str

    def describe(self) -> str:
        return f"cancel allocation {self.recipe}/a{self.index} job {self.job_id} ({self.reason})"


Action = SubmitAlloc | LaunchStep | CancelStep | CancelAlloc


@dataclass(frozen=True)
class Plan:
    actions: tuple[Action, ...] = ()
    notes: tuple[str, ...] = ()  # why something is *not* being done
    refused_prune: bool = False

    def __bool__(self) -> bool:
        return bool(self.actions)

    def for_recipe(self, name: str) -> list[Action]:
        return [a for a in self.actions if recipe_of(a) == name]


def recipe_of(a: Action) -> str:
    if isinstance(a, SubmitAlloc):
        return a.spec.recipe
    if isinstance(a, LaunchStep):
        return a.unit.recipe
    return a.recipe


def plan(desired: Desired, observed: Observed, now: float = 0.0, allow_empty: bool = False) -> Plan:
    cancels: list[Action] = []
    submits: list[Action] = []
    launches: list[Action] = []
    notes: list[str] = []
    refused = False

    gone = sorted(observed.recipes() - set(desired.recipes) - set(desired.held))
    for name, why in sorted(desired.held.items()):
        notes.append(f"{name}: left as it is, its desired state cannot be computed: {why}")
    if gone and not desired.recipes and not desired.held and desired.manifests_seen == 0 and not allow_empty:
        notes.append(
            f"refusing to prune {', '.join(gone)}: every manifest is gone at once "
            "(a mis-mounted directory?); run with --allow-empty to tear everything down"
        )
        gone, refused = [], True
    for name in gone:
        cancels += _teardown(name, observed, "recipe deleted")

    for name in sorted(desired.recipes):
        d = desired.recipes[name]
        if d.suspended:
            cancels += _teardown(name, observed, "suspended")
            continue
        c, s, l, n = _converge(d, observed, now)
        cancels += c
        submits += s
        launches += l
        notes += n
    # cancel first (steps before allocations), then submit, then launch
    cancels.sort(key=lambda a: 0 if isinstance(a, CancelStep) else 1)
    return Plan(tuple(cancels + submits + launches), tuple(notes), refused)


def _teardown(name: str, observed: Observed, reason: str) -> list[Action]:
    acts: list[Action] = [
        CancelStep(s.step_id, name, f"{s.role}_{s.index}", reason)
        for s in sorted(observed.steps_of(name), key=_step_order)
        if s.cancellable
    ]
    acts += [CancelAlloc(a.job_id, name, a.index, reason) for a in observed.allocs_of(name) if a.live]
    return acts


def _step_order(s: Step) -> tuple:
    return (ROLE_ORDER.get(s.role, 9), s.index, s.rank, s.step_id)


def restart_gate(policy: RestartPolicy, h: UnitHealth | None, now: float) -> tuple[str, str]:
    """Whether a worker without a step is launched now: ("launch" | "wait" | "stop", why)."""
    if h is None or h.launches == 0:
        return "launch", "missing"
    if h.replacing:
        return "launch", "replacing"
    code, ended = h.ended(now)
    how = "was killed" if code is None else f"exited with code {code}"
    if policy.policy == "never":
        return "stop", f"{how}; restart policy is never"
    if policy.policy == "on-failure" and code == 0:
        return "stop", f"{how}; restart policy on-failure does not restart a clean exit"
    if policy.max_restarts is not None and h.restarts >= policy.max_restarts:
        return "stop", f"{how}; gave up after {h.restarts} restarts (max_restarts)"
    due = ended + policy.delay(h.restarts)
    if now < due:
        return "wait", f"{how}; relaunch in {due - now:.0f}s (backoff, restart {h.restarts + 1})"
    return "launch", f"{how}; restart {h.restarts + 1}"


def _liveness(d: DesiredRecipe, h: UnitHealth | None, now: float) -> str | None:
    """Why a running worker must be stopped, or None."""
    if h is None:
        return None
    if h.fatal:
        return f"fatal log line: {h.fatal[:160]}"
    if h.was_ready and h.probe_failures >= d.liveness_failures:
        return f"liveness: {h.probe_failures} health probes failed in a row"
    if not h.was_ready and h.grace_from is not None and now - h.grace_from > d.startup_grace:
        return f"not Ready within the startup grace of {d.startup_grace:g}s"
    return None


def _converge(
    d: DesiredRecipe, observed: Observed, now: float
) -> tuple[list[Action], list[Action], list[Action], list[str]]:
    cancels: list[Action] = []
    submits: list[Action] = []
    launches: list[Action] = []
    notes: list[str] = []
    live = [a for a in observed.allocs_of(d.name) if a.live]
    keep = set(d.keep_allocs)

    # 3. allocations
    have = {a.index for a in live if a.job_id in keep}
    for spec in d.allocs:
        if spec.index not in have:
            submits.append(SubmitAlloc(spec, f"needed for nodes {spec.start}-{spec.start + spec.count - 1}"))
    drop = [a for a in live if a.job_id not in keep]

    # steps, by unit
    by_unit: dict[tuple[str, int], list[Step]] = {}
    for s in observed.steps_of(d.name):
        by_unit.setdefault((s.role, s.index), []).append(s)
    wanted: dict[tuple[str, int], Unit] = {(u.role, u.index): u for u in d.units}
    if d.frontend is not None:
        wanted[(FRONTEND, 0)] = d.frontend
    waiting = set(d.waiting)

    # 4. scale down / not desired / on a dropped allocation
    dropped_jobs = {a.job_id for a in drop}
    for key, steps in sorted(by_unit.items(), key=lambda kv: (ROLE_ORDER.get(kv[0][0], 9), kv[0][1])):
        if key in wanted:
            continue
        if key in waiting and not any(s.job_id in dropped_jobs for s in steps):
            continue  # its allocation is not running (yet): nothing to do
        why = "scaled down" if key[0] != FRONTEND else "frontend no longer managed"
        cancels += [CancelStep(s.step_id, d.name, f"{s.role}_{s.index}", why) for s in sorted(steps, key=_step_order)
                    if s.cancellable]
    for a in drop:
        cancels.append(CancelAlloc(a.job_id, d.name, a.index, "no longer needed"))

    ready = {key for key in wanted if observed.ready.get((d.name, key[0], key[1]))}
    workers = [k for k in wanted if k[0] != FRONTEND]
    unavailable = sum(1 for k in workers if k not in ready) + len(waiting)
    budget = d.max_unavailable - unavailable
    outdated: list[tuple[tuple[str, int], list[Step]]] = []

    for key, unit in sorted(wanted.items(), key=lambda kv: (ROLE_ORDER.get(kv[0][0], 9), kv[0][1])):
        steps = by_unit.get(key, [])
        job = d.job_of.get(key, "")
        current = [s for s in steps if s.spec_hash == unit.spec_hash and s.job_id == job]
        stale = [s for s in steps if s not in current]
        health = observed.health.get((d.name, key[0], key[1]))
        if not steps:
            # 5. (re)launch; 7. the frontend waits for a Ready worker
            if key[0] == FRONTEND and not any(k[0] != FRONTEND for k in ready):
                notes.append(f"{d.name}: frontend waits for a Ready worker")
                continue
            decision, why = restart_gate(d.policy(key[0]), health, now)
            if decision != "launch":
                notes.append(f"{d.name}: {unit.name} {why}")
                continue
            launches += [LaunchStep(unit, l, job, why) for l in unit.launches]
            continue
        if stale:
            outdated.append((key, stale))
            continue
        ranks = {s.rank for s in current}
        expected = {l.rank for l in unit.launches}
        if not expected <= ranks:
            # a rank of a multi-node worker died: the whole endpoint comes back together
            cancels += [CancelStep(s.step_id, d.name, unit.name, "a rank died: relaunching the whole worker")
                        for s in sorted(current, key=_step_order) if s.cancellable]
            continue
        seen: set[int] = set()
        for s in sorted(current, key=lambda s: (s.pending, _step_num(s.step_id))):
            if s.rank in seen and s.cancellable:
                cancels.append(CancelStep(s.step_id, d.name, unit.name, "duplicate step"))
            seen.add(s.rank)
        # 5b. liveness: a worker that is up but dead inside is stopped; 5 brings it back
        dead = None if not all(s.cancellable for s in current) else _liveness(d, health, now)
        if dead:
            cancels += [CancelStep(s.step_id, d.name, unit.name, dead) for s in sorted(current, key=_step_order)]

    # 6. rollout, one at a time
    for key, stale in outdated:
        not_ready = key not in ready
        if not_ready or budget > 0:
            if not not_ready:
                budget -= 1
            cancels += [CancelStep(s.step_id, d.name, f"{key[0]}_{key[1]}", "spec changed: replacing", replace=True)
                        for s in sorted(stale, key=_step_order) if s.cancellable]
        else:
            notes.append(f"{d.name}: {key[0]}_{key[1]} waits to be replaced until fewer than "
                         f"{d.max_unavailable} worker(s) are unavailable")
    for name in d.unplaceable:
        notes.append(f"{d.name}: {name} cannot be placed: its nodes straddle an existing allocation "
                     "(delete and re-create the recipe to re-pack it)")
    return cancels, submits, launches, notes


def _step_num(step_id: str) -> tuple[int, str]:
    tail = step_id.rsplit(".", 1)[-1]
    return (int(tail), step_id) if tail.isdigit() else (1 << 62, step_id)
