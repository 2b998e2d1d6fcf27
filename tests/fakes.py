"""An in-memory cluster for pure tests of desired/plan (no processes, no Slurm)."""

from __future__ import annotations

import dataclasses

import itertools
from dataclasses import dataclass, field
from pathlib import Path

from reconciler.desired.build import build
from reconciler.core.plan import CancelAlloc, CancelStep, LaunchStep, Plan, SubmitAlloc, plan
from reconciler.core.ports import NodePortAllocator
from reconciler.desired.admission import load_text
from reconciler.world import Alloc, Desired, Observed, Step, UnitHealth

STATE = Path("/state")


def recipe(text: str, name: str = "r"):
    return load_text(text, f"{name}.yaml").recipe


@dataclass
class FakeCluster:
    """Allocations start RUNNING on fresh node names unless ``pending``; every step is Ready unless marked."""

    allocs: dict[str, Alloc] = field(default_factory=dict)
    steps: dict[str, Step] = field(default_factory=dict)
    unready: set = field(default_factory=set)
    health: dict = field(default_factory=dict)  # unit key -> UnitHealth
    analysis: dict = field(default_factory=dict)  # Observed.analysis: (recipe, role, spec) -> finished runs
    pending: bool = False
    ports: NodePortAllocator = field(default_factory=NodePortAllocator)
    _jobs: itertools.count = field(default_factory=lambda: itertools.count(100))
    _steps: dict = field(default_factory=dict)
    node_names: str = "n{}"
    # False: jobs labelled as before desired/baseline.py (no packed=): the file's packing decides
    packed_labels: bool = True

    def observed(self, desired: Desired | None = None) -> Observed:
        """Every step answers its probe unless its unit key (or (unit key, slot)) is in ``unready``.
        With ``desired``, a unit is Ready when a step runs in its desired slot, and a surging
        worker's old life when one runs in the old slot; a Ready unit without a given health has
        been Ready for long (its successor's hand-over is due)."""
        def up(s: Step) -> bool:
            return s.unit_key not in self.unready and (s.unit_key, s.slot) not in self.unready

        if desired is None:
            ready = {s.unit_key: True for s in self.steps.values() if up(s)}
            return Observed(tuple(self.allocs.values()), tuple(self.steps.values()), ready, dict(self.health),
                            analysis=dict(self.analysis))
        slot = {u.key: u.slot for d in desired.recipes.values() for u in d.all_units}
        old = {u.key: u.slot for d in desired.recipes.values() for u in d.previous.values()}
        ready = {s.unit_key: True for s in self.steps.values() if up(s) and slot.get(s.unit_key, 0) == s.slot}
        prev = {s.unit_key: True for s in self.steps.values() if up(s) and old.get(s.unit_key) == s.slot}
        health = {k: UnitHealth(launches=1, was_ready=True, ready_since=-1e6, first_ready=-1e6) for k in ready} | self.health
        return Observed(tuple(self.allocs.values()), tuple(self.steps.values()), ready, health,
                        previous_ready=prev, analysis=dict(self.analysis))

    def desired(self, recipes: dict, manifests_seen: int | None = None, allow_empty: bool = False) -> Desired:
        seen = len(recipes) if manifests_seen is None else manifests_seen
        return build(recipes, Observed(tuple(self.allocs.values()), tuple(self.steps.values())), self.ports, STATE,
                     "py", seen, allow_empty=allow_empty)

    def plan(self, recipes: dict, allow_empty: bool = False, manifests_seen: int | None = None,
             now: float = 0.0) -> Plan:
        desired = self.desired(recipes, manifests_seen, allow_empty)
        return plan(desired, self.observed(desired), now)

    def apply(self, p: Plan) -> None:
        for a in p.actions:
            if isinstance(a, SubmitAlloc):
                s = a.spec
                job = str(next(self._jobs))
                state = "PENDING" if self.pending else "RUNNING"
                nodes = () if self.pending else tuple(self.node_names.format(f"{s.recipe}-{s.index}-{i}") for i in range(s.count))
                self.allocs[job] = Alloc(job, s.recipe, s.index, s.start, s.count, state,
                                         "Resources" if self.pending else "None", nodes, gpus=s.gpus_per_node,
                                         packed=(s.packed or None) if self.packed_labels else None)
            elif isinstance(a, LaunchStep):
                held = self.allocs[a.job_id].gpus
                assert held is None or max(a.launch.gpus, default=-1) < held, \
                    f"{a.describe()}: GPUs {a.launch.gpus} in a job that holds {held} per node"
                n = self._steps.get(a.job_id, 0)
                self._steps[a.job_id] = n + 1
                u = a.unit
                sid = f"{a.job_id}.{n}"
                self.steps[sid] = Step(sid, u.recipe, u.role, u.index, a.launch.rank, u.spec_hash, a.launch.nodes,
                                       slot=u.slot)
            elif isinstance(a, CancelStep):
                self.steps.pop(a.step_id, None)
            elif isinstance(a, CancelAlloc):
                self.allocs.pop(a.job_id, None)
                for sid in [s for s in self.steps if s.split(".")[0] == a.job_id]:
                    del self.steps[sid]

    def run_alloc(self) -> None:
        """Slurm grants every pending allocation."""
        for job, a in list(self.allocs.items()):
            if a.state == "PENDING":
                nodes = tuple(self.node_names.format(f"{a.recipe}-{a.index}-{i}") for i in range(a.count))
                self.allocs[job] = dataclasses.replace(a, state="RUNNING", reason="None", nodes=nodes)

    def converge(self, recipes: dict, rounds: int = 60, **kw) -> int:
        for i in range(rounds):
            p = self.plan(recipes, **kw)
            if not p.actions:
                return i
            self.apply(p)
        raise AssertionError(f"no fixpoint after {rounds} rounds; last plan: {[a.describe() for a in p.actions]}")
