"""plan() time at scale, and Slurm commands per tick at 1 vs 50 recipes.

    python benchmarks/plan_scale.py

Builds N recipes x 10 mocker workers, a synthetic observed state in which every
worker runs (the steady state a resync sees), and times desired-state building and
plan() separately. Then counts the cluster commands one observation issues through
the Slurm driver at 1 and at 50 recipes (with squeue stubbed by a recorder: the point
is the number of calls, which must not grow with the recipes). Prints; asserts nothing.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from reconciler.desired.build import build  # noqa: E402
from reconciler.drivers.slurm import SlurmDriver  # noqa: E402
from reconciler.core.plan import plan  # noqa: E402
from reconciler.core.ports import NodePortAllocator  # noqa: E402
from reconciler.desired.admission import load_text  # noqa: E402
from reconciler.world import Alloc, Observed, Step  # noqa: E402

TEXT = """\
name: {name}
model: {{path: /m}}
resources: {{gpus_per_node: 8}}
engine: mocker
frontend: {{type: none}}
roles: {{agg: {{workers: 10, gpus: 1}}}}
"""


def world(n: int):
    base = load_text(TEXT.format(name="r0"), "r0.yaml").recipe
    recipes = {f"r{i}": base.model_copy(update={"name": f"r{i}"}) for i in range(n)}
    allocs = tuple(Alloc(str(1000 + i), f"r{i}", 0, 0, 2, "RUNNING", "None", (f"n{i}a", f"n{i}b")) for i in range(n))
    ports = NodePortAllocator()
    pre = Observed(allocs, ())
    desired = build(recipes, pre, ports, Path("/state"), "python3", n)
    steps, ready = [], {}
    for name, d in desired.recipes.items():
        job = d.job_of[("agg", 0)]
        for k, u in enumerate(d.units):
            steps.append(Step(f"{job}.{k}", name, u.role, u.index, 0, u.spec_hash, u.nodes))
            ready[u.key] = True
    return recipes, allocs, ports, Observed(allocs, tuple(steps), ready)


def bench(n: int, repeat: int = 3) -> None:
    recipes, allocs, ports, observed = world(n)
    t_build, t_cached, t_plan = [], [], []
    cache: dict = {}
    for _ in range(repeat):
        t0 = time.perf_counter()
        desired = build(recipes, Observed(allocs, observed.steps), ports, Path("/state"), "python3", n)
        t1 = time.perf_counter()
        p = plan(desired, observed, 0.0)
        t2 = time.perf_counter()
        build(recipes, Observed(allocs, observed.steps), ports, Path("/state"), "python3", n, cache)  # warm
        t3 = time.perf_counter()
        build(recipes, Observed(allocs, observed.steps), ports, Path("/state"), "python3", n, cache)
        t4 = time.perf_counter()
        t_build.append(t1 - t0)
        t_plan.append(t2 - t1)
        t_cached.append(t4 - t3)
        assert not p.actions, "steady state must plan nothing"
    workers = n * 10
    print(f"{n:>5} recipes x 10 = {workers:>6} workers: plan() {statistics.median(t_plan) * 1e3:8.1f} ms"
          f"   (per worker {statistics.median(t_plan) / workers * 1e6:.1f} us)"
          f"   desired build {statistics.median(t_build) * 1e3:8.1f} ms, steady-state (cached) "
          f"{statistics.median(t_cached) * 1e3:7.1f} ms")


class Recorder(SlurmDriver):
    """The Slurm driver with its subprocess calls counted instead of run."""

    def __init__(self, n: int):
        super().__init__(Path("/tmp"), user="bench")
        self.n = n

    def _run(self, argv, check=True):
        import subprocess

        self.commands += 1
        return subprocess.CompletedProcess(argv, 0, "", "")


def commands_per_tick(n: int) -> int:
    d = Recorder(n)
    d.observe()
    return d.commands


if __name__ == "__main__":
    print("plan() at scale (target: <= 100 ms at 10,000 workers)")
    for n in (100, 1000, 5000):
        bench(n, repeat=3 if n < 5000 else 1)
    one, fifty = commands_per_tick(1), commands_per_tick(50)
    print(f"Slurm commands per observation: {one} at 1 recipe, {fifty} at 50 recipes "
          f"({'equal' if one == fifty else 'NOT equal'})")
