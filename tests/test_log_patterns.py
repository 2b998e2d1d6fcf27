"""Log patterns are matched in linear time (issue 48, item 2): RE2, reconciler/logpattern.py.

``readiness.log.pattern: "(a|aa)+b"`` passed the old check (it looked only for nested repeats)
and a service printing 36 ``a``s stopped the loop for 30 s under Python's backtracking ``re``.
Here a worker's log holds 100,000 ``a``s on one line: a whole pass of the controller (the real
HealthTracker reading the real file) must still take well under a second, and the line after it
that does match is found.
"""

from __future__ import annotations

import multiprocessing
import time

import pytest

from load import scaled

from reconciler.drivers.base import step_log_paths
from reconciler.drivers.memory import MemoryDriver
from reconciler.logpattern import PatternError, compile_pattern
from reconciler.recipe.types import check_regex
from reconciler.shell.loop import Controller

RECIPE = """\
name: slow
model: {path: m}
engine: mocker
frontend: {type: none}
roles: {agg: {workers: 1, gpus: 1}}
health_check: {extra_fatal_log_patterns: ['(a|aa)+b']}
"""
PASS_WITHIN = 5.0  # seconds: a pass takes milliseconds here; Python's re, longer than the universe


def _scenario(tmp_path) -> tuple[float, str | None, str | None]:
    """The worker's log gets 100,000 ``a``s on a line, then a line that matches: how long the
    pass over the first took, and the fatal line found after each."""
    m = tmp_path / "manifests"
    m.mkdir()
    (m / "slow.yaml").write_text(RECIPE)
    c = Controller(m, tmp_path / "state", MemoryDriver(host="node0"))
    c.debounce = 0
    for _ in range(3):  # submit the allocation, then launch the worker on it
        snap, _ = c.tick()
    (unit,) = snap.desired.recipes["slow"].units
    log = step_log_paths(c.state.root, "slow", unit.life, 0).log
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("a" * 100_000 + "\n")
    t0 = time.monotonic()
    c.tick()
    took = time.monotonic() - t0
    before = c.observer.tracker.life(unit.key).fatal
    with log.open("a") as f:
        f.write("a" * 50 + "aab\n")  # this line does match: the unit is found dead
    c.tick()
    return took, before, c.observer.tracker.life(unit.key).fatal


def _child(tmp_path, out) -> None:
    out.send(_scenario(tmp_path))


def test_a_pathological_pattern_on_a_long_line_cannot_stall_a_pass(tmp_path):
    # in a process of its own: a backtracking match holds the GIL, no thread could time it out.
    # Spawned, not forked: a fork of an xdist worker whose earlier tests left threads (servers,
    # pools) can inherit a lock one of them held and hang before the scenario starts (CI, 90 s)
    ctx = multiprocessing.get_context("spawn")
    got, out = ctx.Pipe(duplex=False)
    p = ctx.Process(target=_child, args=(tmp_path, out), daemon=True)
    p.start()
    # the bound for what the test itself runs is stretched on a busy machine (tests/load.py): a
    # backtracking match of this pattern would take hours, so a minute more hides nothing
    within = scaled(PASS_WITHIN + 60)  # + the three passes before (milliseconds each when quiet)
    ready = got.poll(within)
    if not ready:
        p.kill()
    p.join(5)
    assert ready, f"the passes did not finish within {within:.0f} s: the log pattern backtracks"
    took, before, after = got.recv()
    assert took < scaled(PASS_WITHIN), took
    assert before is None and after == "a" * 52 + "b", (before, after)
    print(f"\na pass over a 100,000-character line with (a|aa)+b: {took * 1000:.1f} ms")


@pytest.mark.parametrize("pattern", [r"(a|aa)+b", r"^(\w+\s?)*$", r"(a+)+b", r"CUDA error: .*", r"(?i)out of memory"])
def test_any_re2_pattern_is_accepted_nested_repeats_included(pattern):
    assert check_regex(pattern) == pattern


@pytest.mark.parametrize("pattern, why", [
    (r"(a)\1", "invalid escape sequence"), (r"error(?!: ignored)", "invalid perl operator"), (r"(", r"missing \)"),
])
def test_what_re2_cannot_match_in_linear_time_is_refused_with_why(pattern, why):
    with pytest.raises(PatternError, match=why):
        compile_pattern(pattern)
    with pytest.raises(ValueError, match="cannot be matched in linear time"):
        check_regex(pattern)
