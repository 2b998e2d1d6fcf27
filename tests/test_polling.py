"""How often the loop asks the cluster, per situation: settled, waiting on Slurm's queue, converging.

The loop runs for one simulated minute on a fake clock (its sleeps advance the clock, no real
waiting) against the real Slurm driver in front of a Slurm held in memory (tests/slurm_world.py):
every command the driver builds is recorded as its argv, and squeue answers in its own format,
so what is counted is the commands a login node would run. Probes answer Ready for every unit
that runs (the probe is not what is measured here). The real-Slurm counterpart is
tests/test_queue_wait.py (the reconciler's metrics count squeue calls per tick).
"""

from __future__ import annotations

import time

import pytest

import reconciler.shell.gateway.holder_supervisor as holder
import reconciler.shell.observe as observe
import reconciler.shell.readiness.probe as probe
from reconciler.drivers.memory import MemoryDriver
from reconciler.shell.loop import Controller
from slurm_world import RecordingSlurm
from harness import _ranges

RECIPE = ("name: {name}\nmodel: {{path: m}}\nengine: mocker\nfrontend: {{type: none}}\n"
          "roles: {{agg: {{workers: 2, gpus: 1}}}}\n")
MINUTE = 60.0
RESYNC = 5.0


class FakeClock:
    def __init__(self):
        self.t = time.time()

    def __call__(self) -> float:
        return self.t


def run_for(tmp_path, monkeypatch, recipes: int, ready: bool, seconds: float = MINUTE, **driver_kw):
    """Deploy, let it settle (fake time), then record the commands of ``seconds`` more: (their
    names, the ticks, the loop's waits, the controller)."""
    monkeypatch.setattr(observe, "probe_units", lambda units, **kw: {u.key: ready for u in units})
    m = tmp_path / "manifests"
    m.mkdir()
    for i in range(recipes):
        (m / f"r{i}.yaml").write_text(RECIPE.format(name=f"r{i}"))
    clock = FakeClock()
    drv = RecordingSlurm(tmp_path / "state", clock=clock, **driver_kw)
    c = Controller(m, tmp_path / "state", drv)
    c.debounce = 0
    c.clock = clock
    for _ in range(3):  # submit, launch, see them run
        c.tick()
    assert len(drv.jobs) == recipes, drv.argvs  # the allocations were submitted (sbatch) and are listed
    start_commands, start_ticks, end = len(drv.argvs), c.ticks, clock.t + seconds
    waits: list[float] = []

    def sleep(w: float) -> None:
        waits.append(w)
        clock.t += w
        if clock.t >= end:
            c.stop()

    c.sleep = sleep
    c.run(resync=RESYNC, once=False)
    return drv.verbs(start_commands), c.ticks - start_ticks, waits, c


def looks(ticks: int) -> list[str]:
    """One job query and one step query per tick, nothing else."""
    return ["squeue", "squeue -s"] * ticks


@pytest.mark.parametrize("recipes", [1, 50])
def test_settled_exactly_two_queries_per_resync(tmp_path, monkeypatch, recipes):
    commands, ticks, waits, c = run_for(tmp_path, monkeypatch, recipes, ready=True)
    assert set(waits) == {RESYNC}
    assert ticks == int(MINUTE / RESYNC)
    assert commands == looks(ticks)  # 24 squeue a minute, whatever the number of recipes
    assert not c.tick_failures


def test_an_allocation_queued_for_long_is_looked_at_on_the_resync(tmp_path, monkeypatch):
    commands, ticks, waits, _ = run_for(tmp_path, monkeypatch, 10, ready=True, alloc_state="PENDING",
                                        queued_for=600.0, reason="Resources")
    assert set(waits) == {RESYNC} and commands == looks(int(MINUTE / RESYNC))


def test_a_just_submitted_allocation_is_looked_at_less_and_less_often(tmp_path, monkeypatch):
    commands, ticks, waits, _ = run_for(tmp_path, monkeypatch, 10, ready=True, alloc_state="PENDING",
                                        reason="Priority")
    assert min(waits) >= 1.0  # never the converging interval
    assert waits == sorted(waits) and waits[-1] == RESYNC
    # issue 29: Slurm's expected start of the pending allocation is asked at the same slowing pace, one
    # squeue --start for all of them, never more often than the ticks that look at the queue
    start = [c for c in commands if c == "squeue --start"]
    assert 1 <= len(start) <= ticks
    commands = [c for c in commands if c != "squeue --start"]
    assert commands == looks(ticks) and ticks <= int(MINUTE / RESYNC) + 6  # a few quicker looks in the first seconds


def test_converging_ticks_at_the_active_interval(tmp_path, monkeypatch):
    commands, ticks, waits, _ = run_for(tmp_path, monkeypatch, 1, ready=False, seconds=10.0)
    assert set(waits) == {0.5} and ticks == 20 and commands == looks(20)  # workers starting: probe twice a second


def test_a_settled_tick_rewrites_no_state_file_but_the_tick_counter(tmp_path, monkeypatch):
    """Status (its updatedAt is the last change), launch records, ports, endpoints, last-applied
    specs: unchanged content is not written again, however much time passes."""
    monkeypatch.setattr(observe, "probe_units", lambda units, **kw: {u.key: True for u in units})
    # the gateways' health is asked each tick (5 s of fake clock apart): one answer slower than the
    # 1 s probe timeout on a loaded host would count a failure and rewrite gateway.json (twice)
    real_fetch = probe.fetch
    monkeypatch.setattr(probe, "fetch", lambda url, timeout=None: real_fetch(url, 30.0))
    m = tmp_path / "manifests"
    m.mkdir()
    for i in range(3):
        (m / f"r{i}.yaml").write_text(RECIPE.format(name=f"r{i}").replace("type: none", "type: builtin"))
    clock = FakeClock()
    lo = next(_ranges)  # this test worker's own ports (the gateways and holders are real processes)
    c = Controller(m, tmp_path / "state", MemoryDriver(clock=clock), port_range=(lo, lo + 99))
    c.debounce = 0
    c.clock = clock
    for _ in range(4):
        c.tick()
    state = tmp_path / "state"
    for i in range(3):  # the holders' one start line in their own log is written once they listen
        found = holder.running(state / f"r{i}" / "gateway")
        assert found is not None, f"r{i}: no holder running"
        cmd = found[1]
        assert holder.wait_listening(int(cmd[cmd.index("--port") + 1])), f"r{i}: the holder does not answer"

    def files() -> dict[str, tuple[int, int]]:
        return {str(p.relative_to(state)): (p.stat().st_ino, p.stat().st_mtime_ns)
                for p in state.rglob("*") if p.is_file()}

    before = files()
    assert {"ports.json", "r0/status.json", "r0/launches.json", "r0/endpoints.json", "r0/last-applied.yaml"} <= set(before)
    for _ in range(5):
        clock.t += RESYNC
        _snap, done = c.tick()
        assert not done
    after = files()
    changed = sorted(k for k in after if before.get(k) != after[k])
    assert changed == ["controller.json"]
