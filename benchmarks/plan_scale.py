"""plan() time at scale, and the Slurm commands of one observation at 1 vs 50 recipes.

    python benchmarks/plan_scale.py [--sizes 100,1000,5000] [--commands-at 1,50]
    python benchmarks/plan_scale.py --smoke      # its smallest sizes: CI runs it

Its tables are docs/performance.md, section "plan() at scale (benchmarks/plan_scale.py)".

Builds N recipes x 10 mocker workers, a synthetic observed state in which every
worker runs (the steady state a resync sees), and times desired-state building and
plan() separately. Then the real ``Controller`` deploys 1 and 50 such recipes through the
real Slurm driver in front of an in-memory Slurm (tests/slurm_world.py: every argv the
driver builds is recorded, squeue answers in its own format with every allocation and
step listed), and one more observation is made: its commands (which must not grow with the
recipes) and the time the driver's parsers take to read squeue's answer. Prints; asserts nothing.
"""

from __future__ import annotations

import argparse
from collections import Counter
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # slurm_world: the recording Slurm shared with tests/test_polling.py

from reconciler.desired.build import build  # noqa: E402
from reconciler import labels  # noqa: E402
from reconciler.drivers.slurm import parse_jobs, parse_steps  # noqa: E402
from reconciler.core.plan import plan  # noqa: E402
from reconciler.core.ports import NodePortAllocator  # noqa: E402
from reconciler.desired.admission import load_text  # noqa: E402
from reconciler.world import Alloc, Observed, Step  # noqa: E402
from slurm_world import RecordingSlurm  # noqa: E402

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
    print(f"{n:>7} {workers:>7} {statistics.median(t_plan) * 1e3:>10.1f} "
          f"{statistics.median(t_plan) / workers * 1e6:>9.1f} {statistics.median(t_build) * 1e3:>9.1f} "
          f"{statistics.median(t_cached) * 1e3:>15.1f}")


def deployed(tmp: Path, n: int) -> RecordingSlurm:
    """The real Slurm driver in front of an in-memory Slurm (tests/slurm_world.py) after the real
    ``Controller`` deployed ``n`` recipes of 10 workers through it (sbatch, srun recorded; squeue
    answering in its own format with every allocation and step listed)."""
    import reconciler.shell.observe as observe
    from reconciler.shell.loop import Controller

    observe.probe_units = lambda units, **kw: {u.key: True for u in units}  # Ready: the probe is not measured
    m = tmp / "manifests"
    m.mkdir()
    for i in range(n):
        (m / f"r{i}.yaml").write_text(TEXT.format(name=f"r{i}"))
    drv = RecordingSlurm(tmp / "state", nodes=("gpu-a01", "gpu-a02"))
    c = Controller(m, tmp / "state", drv)
    c.debounce = 0
    for _ in range(3):  # submit, launch, see them run
        c.tick()
    steps = sum(1 for name, _ in drv.steps.values() if name.startswith("rcl:"))
    if len(drv.jobs) != n or steps != 10 * n:
        raise SystemExit(f"{n} recipes did not deploy: {len(drv.jobs)} allocations, {steps} steps")
    return drv


def observation(n: int, repeat: int) -> tuple[list[str], float, int]:
    """The commands one observation issues at ``n`` deployed recipes, the median time the driver
    takes to read squeue's answer into allocations and steps, and the lines it read."""
    with tempfile.TemporaryDirectory(prefix="plan-scale-") as tmp:
        drv = deployed(Path(tmp), n)
        before = len(drv.argvs)
        allocs, steps = drv.observe()
        verbs = drv.verbs(before)
        if len(allocs) != n or len(steps) != 10 * n:
            raise SystemExit(f"the driver read {len(allocs)} allocations and {len(steps)} steps of {n} recipes")
        jobs_text, steps_text = drv.squeue_jobs(), drv.squeue_steps()
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            allocs = parse_jobs(jobs_text, drv.owner)
            parse_steps(steps_text, drv.owner, labels.tags({a.recipe for a in allocs}))
            times.append(time.perf_counter() - t0)
        return verbs, statistics.median(times), jobs_text.count("\n") + steps_text.count("\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="100,1000,5000", help="recipes (x 10 workers) to time plan() at")
    ap.add_argument("--commands-at", default="1,50", help="recipe counts to count one observation's commands at")
    ap.add_argument("--smoke", action="store_true", help="the smallest sizes (10 recipes; commands at 1 and 2): that it runs")
    a = ap.parse_args()
    import logging

    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    if a.smoke:
        a.sizes, a.commands_at = "10", "1,2"
    print("plan() at scale (target: <= 100 ms at 10,000 workers)")
    print(f"{'recipes':>7} {'workers':>7} {'plan() ms':>10} {'us/worker':>9} {'build ms':>9} {'cached build ms':>15}")
    for n in map(int, a.sizes.split(",")):
        bench(n, repeat=3 if n < 5000 else 1)
    print("one observation through the Slurm driver (squeue answering in its own format)")
    print(f"{'recipes':>7} {'steps':>6} {'commands':>8} {'squeue lines':>12} {'parse ms':>9}  which")
    seen = []
    for n in map(int, a.commands_at.split(",")):
        verbs, parse, lines = observation(n, 5)
        seen.append(verbs)
        print(f"{n:>7} {10 * n:>6} {len(verbs):>8} {lines:>12} {parse * 1e3:>9.2f}  {', '.join(f'{v} x{k}' for v, k in Counter(verbs).items())}")
    print(f"Slurm commands per observation: {'equal' if all(v == seen[0] for v in seen) else 'NOT equal'} "
          f"at {a.commands_at} recipes")


if __name__ == "__main__":
    main()
