"""Sort what a recipe has on the cluster into named sets; every policy reads these.

Per desired unit (a worker or the frontend, keyed by (role, index)):

- ``missing``: no step at all — to place (never launched) or relaunch (it had lives).
- ``running``: every rank runs the current spec on the unit's allocation.
- ``broken``: current spec, but a rank of a multi-node worker is gone; the ranks left
  are foreign to any whole worker and must go so that it comes back whole.
- ``outdated``: some step runs an older spec, or sits on another allocation.
- ``waiting``: its allocation is not running (yet); nothing can be done for it.

And per step: ``extra`` (a unit that is not desired: scaled down, frontend no longer
managed, or on an allocation being released), ``duplicates`` (a second step for one
rank; the older one stays). ``terminating`` steps — cancelled moments ago and still
shutting down — are in whichever set their unit falls in, marked, and never cancelled
again.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import NamedTuple

from reconciler.world import FRONTEND, SERVICE_PREFIX, Unit, is_service_role
from reconciler.world import DesiredRecipe, Observed, Step, UnitHealth

UnitKey = tuple[str, int]  # (role, index) within a recipe
ROLE_ORDER = {"prefill": 1, "decode": 2, "agg": 3, FRONTEND: 4}  # services: 0


def _role_order(role: str) -> int:
    return 0 if is_service_role(role) else ROLE_ORDER.get(role, 9)


# the two sort keys below are called for every unit and step of every plan(): _role_order inlined
def unit_order(key: UnitKey) -> tuple[int, str, int]:
    role = key[0]
    return (0 if role.startswith(SERVICE_PREFIX) else ROLE_ORDER.get(role, 9), role, key[1])


def step_order(s: Step) -> tuple:
    role = s.role
    return (0 if role.startswith(SERVICE_PREFIX) else ROLE_ORDER.get(role, 9), role, s.index, s.rank, s.step_id)


def step_number(step_id: str) -> tuple[int, str]:
    tail = step_id.rsplit(".", 1)[-1]
    return (int(tail), step_id) if tail.isdigit() else (1 << 62, step_id)


class UnitView(NamedTuple):
    """One desired unit with what runs of it. A named tuple, not a frozen dataclass: one is made
    for every unit of every recipe on each plan(), and a tuple is built at a third of the cost."""

    unit: Unit
    job: str  # the allocation it belongs on
    current: tuple[Step, ...]  # steps running its current spec on that allocation
    old: tuple[Step, ...]  # steps running an older spec or on another allocation
    health: UnitHealth | None
    ready: bool
    old_ready: bool = False  # a surging worker's old life (its previous slot) answers its probe

    @property
    def key(self) -> UnitKey:
        return (self.unit.role, self.unit.index)

    @property
    def name(self) -> str:
        return self.unit.name

    @property
    def steps(self) -> tuple[Step, ...]:
        return self.current + self.old

    @property
    def is_frontend(self) -> bool:
        return self.unit.role == FRONTEND

    @property
    def is_worker(self) -> bool:
        return not self.is_frontend and not self.unit.is_service

    @property
    def ever_launched(self) -> bool:
        return self.health is not None and self.health.launches > 0


@dataclass(frozen=True)
class Classified:
    missing: tuple[UnitView, ...] = ()
    running: tuple[UnitView, ...] = ()
    broken: tuple[UnitView, ...] = ()
    outdated: tuple[UnitView, ...] = ()
    waiting: tuple[UnitKey, ...] = ()
    extra: tuple[tuple[Step, str], ...] = ()  # (step, "scaled down" | "frontend")
    duplicates: tuple[Step, ...] = ()
    ordered: tuple[UnitView, ...] | None = None  # the four sets' views in unit order (classify makes them so)

    @cached_property  # every policy reads it: made once per plan, not once per reader
    def units(self) -> tuple[UnitView, ...]:
        if self.ordered is not None:
            return self.ordered
        return tuple(sorted(self.missing + self.running + self.broken + self.outdated,
                            key=lambda v: unit_order(v.key)))

    @property
    def ready(self) -> frozenset[UnitKey]:
        return frozenset(v.key for v in self.units if v.ready)

    def any_worker_ready(self) -> bool:
        return any(v.ready and v.is_worker for v in self.units)


def wanted_units(d: DesiredRecipe) -> dict[UnitKey, Unit]:
    wanted: dict[UnitKey, Unit] = {(u.role, u.index): u for u in d.services + d.units}
    for fe in d.frontends:
        wanted[(FRONTEND, fe.index)] = fe
    return wanted


def classify(d: DesiredRecipe, observed: Observed, dropped_jobs: frozenset[str]) -> Classified:
    by_unit: dict[UnitKey, list[Step]] = {}
    for s in observed.steps_of(d.name):
        by_unit.setdefault((s.role, s.index), []).append(s)
    wanted = wanted_units(d)
    waiting = set(d.waiting)
    sets: dict[str, list] = {k: [] for k in ("missing", "running", "broken", "outdated", "extra", "duplicates")}
    ordered: list[UnitView] = []

    for key in sorted((k for k in by_unit if k not in wanted), key=unit_order):
        steps = by_unit[key]
        if key in waiting and not any(s.job_id in dropped_jobs for s in steps):
            continue  # its allocation is not running (yet): nothing to do
        kind = "frontend" if key[0] == FRONTEND else "service" if is_service_role(key[0]) else "scaled down"
        sets["extra"] += [(s, kind) for s in sorted(steps, key=step_order)]

    for key in sorted(wanted, key=unit_order):
        unit = wanted[key]
        steps = by_unit.get(key, [])
        job = d.job_of.get(key, "")
        cur: list[Step] = []
        rest: list[Step] = []
        for s in steps:
            (cur if s.spec_hash == unit.spec_hash and s.job_id == job else rest).append(s)
        current = tuple(sorted(cur, key=step_order)) if len(cur) > 1 else tuple(cur)
        old = tuple(sorted(rest, key=step_order)) if len(rest) > 1 else tuple(rest)
        ukey = unit.key
        ready = bool(observed.ready.get(ukey))
        view = UnitView(unit, job, current, old, observed.health.get(ukey), ready,
                        bool(observed.previous_ready.get(ukey)) if key in d.previous else ready)
        ordered.append(view)
        if not steps:
            sets["missing"].append(view)
        elif old:
            sets["outdated"].append(view)
        elif not _whole(unit, current):
            sets["broken"].append(view)
        else:
            sets["running"].append(view)
            sets["duplicates"] += _duplicates(current)
    return Classified(
        missing=tuple(sets["missing"]), running=tuple(sets["running"]), broken=tuple(sets["broken"]),
        outdated=tuple(sets["outdated"]), waiting=tuple(sorted(waiting, key=unit_order)),
        extra=tuple(sets["extra"]), duplicates=tuple(sets["duplicates"]), ordered=tuple(ordered),
    )


def _whole(unit: Unit, current: tuple[Step, ...]) -> bool:
    """Every rank of the unit runs its current spec (one launch of rank 0 and one step: most units)."""
    launches = unit.launches
    if len(launches) == 1 and len(current) == 1:
        return launches[0].rank == current[0].rank
    return {l.rank for l in launches} <= {s.rank for s in current}


def _duplicates(current: tuple[Step, ...]) -> list[Step]:
    """A second step for one rank (a crash between srun and bookkeeping): the older one stays."""
    if len(current) < 2:
        return []
    seen: set[int] = set()
    dups = []
    for s in sorted(current, key=lambda s: (s.pending, step_number(s.step_id))):
        if s.rank in seen and s.cancellable:
            dups.append(s)
        seen.add(s.rank)
    return dups
