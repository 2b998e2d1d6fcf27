"""A recipe whose allocation waits in Slurm's queue, on the real Slurm: two squeue calls per tick,
no fast polling, and `plan` / `get` say what waits instead of "nothing to do".

The allocation is held by ``--begin=now+1hour`` (sbatch_directives), so it stays PENDING with
Slurm's reason BeginTime whatever else runs on the test cluster.
"""

from __future__ import annotations

import json
import re

import pytest

from helpers import free_port, get, wait_until
from reconciler.shell.execute import NO_ESTIMATE_AFTER
from support.clients import labelled_metric as _metric
from support.clusters import slurm_h  # noqa: F401 - the fixture h: a harness on the real Slurm

pytestmark = pytest.mark.slurm

RECIPE = """\
name: {name}
model: {{path: m}}
engine: mocker
frontend: {{type: none}}
sbatch_directives: {{begin: now+1hour}}
roles: {{agg: {{workers: 1, gpus: 1}}}}
"""


def _events(h, name: str) -> list[dict]:
    lines = (h.state / "events.jsonl").read_text().splitlines()
    return [e for e in map(json.loads, lines) if e["recipe"] == name]


def _squeues(port: int) -> float:
    text = get(f"http://127.0.0.1:{port}/metrics", timeout=3)[1].decode()
    return sum(_metric(text, "reconciler_slurm_commands_total", verb="squeue", outcome=o) or 0 for o in ("ok", "failed"))


def _log_lines(h) -> list[dict]:
    """The reconciler's log lines (JSON: its stderr is no terminal)."""
    out = []
    for line in h.log().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def test_a_queued_allocation_costs_two_queries_per_tick_and_is_named_by_plan_and_get(h):
    name = h.name("queued")
    (h.manifests / f"{name}.yaml").write_text(RECIPE.format(name=name))
    mport = free_port()
    h.start("--metrics-addr", f"127.0.0.1:{mport}")
    wait_until(lambda: any(e["kind"] == "SubmitAlloc" for e in h.actions(name)), timeout=30, what="the submit")
    # Slurm's estimate, asked before the submission (sbatch --test-only): the hold's hour at the
    # soonest (later when other tests' jobs hold the node: behind one with no time limit, never)
    (said,) = [e["message"] for e in _events(h, name) if e["kind"] == "ExpectedStart"]
    assert said.startswith("allocation 0 (job ") and said.endswith("(sbatch --test-only)"), said
    # the reconciler's own figure (its log): the message rounds it, or names no time when it is years away
    (wait,) = [e["expected_in"] for e in _log_lines(h) if e.get("event") == "queued"]
    assert wait >= 59 * 60, (wait, said)
    m = re.search(r"start in (?:(\d+)h)?(\d+)m", said)
    if wait < NO_ESTIMATE_AFTER:
        assert m and 60 * int(m[1] or 0) + int(m[2]) >= 59, said
    else:
        assert "only after jobs without a time limit end" in said, said
    first = h.ticks()
    wait_until(lambda: h.ticks() > first, timeout=30, what="a tick after the submit")
    before, ticks = _squeues(mport), h.ticks()
    wait_until(lambda: h.ticks() >= ticks + 3, timeout=30, what="3 more ticks")
    # the scrape and the tick counter are read apart: the count is 2 per tick, give or take the tick in progress
    done = h.ticks() - ticks
    assert 2 * done <= _squeues(mport) - before <= 2 * (done + 1)

    r = h.cli("plan")
    assert r.returncode == 0, r.stderr
    assert "nothing to do; 1 recipe waits for an allocation (BeginTime)" in r.stderr
    r = h.cli("get")
    assert r.returncode == 0 and "1 recipe waits for an allocation (BeginTime)" in r.stderr, r.stderr
    (row,) = json.loads(h.cli("get", name, "-o", "json").stdout)
    assert row["waitingForAllocation"] == "BeginTime" and row["roles"]["agg"]["ready"] == 0
