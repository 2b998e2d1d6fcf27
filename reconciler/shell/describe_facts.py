"""describe's live facts beyond status.json: each unit's next retry and wait, the recipe's Slurm
allocations (time left, the moment Slurm must have it gone, a pending one's reason and expected
start) and whether a benchmark is in flight.

``run`` writes them after each pass as state/<recipe>/detail.json (``write``), so that `describe`
answers from the record as `get` does (cli/describe_recorded.py) instead of importing and
building the whole controller (~1 s). A settled recipe's file is not rewritten: the record holds
moments, not durations — an allocation's end (``endsAt``: the pass's time plus squeue's TimeLeft,
kept when it moved less than ``END_SLACK`` since TimeLeft has a second's grain and the pass a
moment of its own) and a pending job's submission and expected start — and the reader turns
them into "time left" and "pending for" at its own now. `describe` without a `run` builds the
same facts from its own snapshot (``facts``), so both paths say the same thing.
"""

from __future__ import annotations

from typing import Any

from reconciler.drivers.state import StateDir
from reconciler.shell.gates import bench_results
from reconciler.shell.snapshot import Snapshot
from reconciler.record_names import DETAIL_FILE
from reconciler.timefmt import iso, slurm_seconds

FILE = DETAIL_FILE
END_SLACK = 5.0  # seconds an allocation's recorded end may drift before it is rewritten


def units(rp: Any) -> dict[str, dict]:
    """unit -> {nextRetry, waiting} for the units the plan holds back (``rp``: the recipe's plan)."""
    out: dict[str, dict] = {}
    if rp is None:
        return out
    for unit, at in rp.relaunch_later.items():
        out.setdefault(unit, {})["nextRetry"] = iso(at)
    for unit, wait in rp.waiting.items():
        out.setdefault(unit, {})["waiting"] = f"{wait.reason.value}: {wait.detail}" if wait.detail else wait.reason.value
    return out


def allocations(snap: Snapshot, name: str, prev: list[dict] | None = None) -> list[dict]:
    """The recipe's allocations as moments (``prev``: the last record, whose ends are kept when they
    moved less than END_SLACK)."""
    o, now = snap.observed, snap.now
    before = {(a.get("job"), a.get("index")): a.get("endsAt") for a in prev or () if isinstance(a, dict)}
    out = []
    for a in o.allocs_of(name):
        left = slurm_seconds(a.time_left) if a.state == "RUNNING" else None
        end = None if left is None else now + left
        old = before.get((a.job_id, a.index))
        if end is not None and isinstance(old, (int, float)) and abs(old - end) < END_SLACK:
            end = old
        doc: dict[str, Any] = {"job": a.job_id, "index": a.index, "state": a.state, "reason": a.reason,
                               "nodes": list(a.nodes), "timeLimit": a.time_limit or None,
                               # squeue's own words when it gives no duration (UNLIMITED)
                               "timeLeft": a.time_left if left is None and a.time_left else None,
                               "endsAt": end}
        if a.job_id in o.deadlines:
            at, why = o.deadlines[a.job_id]
            doc.update(endsBy=iso(at), endsWhy=why)
        p = o.pending.get(a.job_id)
        if p is not None:
            doc["pending"] = {"reason": p.reason, "start": p.start, "submitted": p.submitted}
        out.append(doc)
    return out


def facts(snap: Snapshot, name: str, prev: dict | None = None) -> dict:
    """The record for one recipe (``prev``: the last one written)."""
    rp = snap.plan.recipes.get(name)
    d = snap.desired.recipes.get(name) or snap.desired.kept.get(name)
    return {"error": snap.manifests.invalid.get(name) or snap.desired.held.get(name),
            "suspended": bool(d and d.suspended), "units": units(rp),
            "allocations": allocations(snap, name, (prev or {}).get("allocations")),
            "benchmarkState": bench_results.now_state(snap.desired.recipes.get(name), snap.observed, rp)}


def write(state: StateDir, snap: Snapshot, name: str) -> None:
    path = state.path_of(name, FILE)
    prev = state.read_json(path, None, lambda x: isinstance(x, dict))
    state.write_json(path, facts(snap, name, prev))
