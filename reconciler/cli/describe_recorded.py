"""`describe` from what the running `run` recorded: state/<recipe>/status.json and detail.json
(shell/describe_facts.py), the events, the autoscaler's and the startup records — no controller.

The record holds moments (an allocation's end, a pending job's submission and expected start);
``present`` turns them into the durations describe shows at the reader's own now. The controller
path (no `run`) builds the same facts from its snapshot and presents them here too, so the two
say the same thing. Standard library and leaf modules only (tests/test_cli_read_fast.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from reconciler.cli.recorded import _json
from reconciler.pending_words import PendingInfo
from reconciler.record_names import DETAIL_FILE, RENAME_REASONS
from reconciler.timefmt import slurm_duration

FILE = DETAIL_FILE


def allocations(recorded: list[Any], now: float) -> list[dict]:
    """describe's Allocations rows from the recorded moments."""
    out = []
    for a in recorded:
        if not isinstance(a, dict):
            continue
        end = a.get("endsAt")
        row = {"job": a.get("job"), "index": a.get("index"), "state": a.get("state"), "reason": a.get("reason"),
               "nodes": a.get("nodes") or [], "timeLimit": a.get("timeLimit"),
               "timeLeft": slurm_duration(end - now) if isinstance(end, (int, float)) else a.get("timeLeft")}
        if a.get("endsBy"):
            row.update(endsBy=a["endsBy"], endsWhy=a.get("endsWhy"))
        p = a.get("pending")
        if isinstance(p, dict):
            row.update(PendingInfo(str(a.get("job")), int(a.get("index") or 0), str(p.get("reason") or ""),
                                   p.get("start"), p.get("submitted")).doc(now))
        out.append(row)
    return out


def annotate(workers: list[dict], units: dict) -> None:
    """Each unit's next retry and wait (None when the plan holds it back for neither)."""
    for w in workers:
        u = units.get(w.get("name")) or {}
        w["nextRetry"] = u.get("nextRetry")
        w["waiting"] = u.get("waiting")


def doc(state: Path, name: str, now: float) -> dict | None:
    """describe's document (its keys as cli/ops._snapshot_doc's), None when `run` has recorded no
    detail for ``name`` (before its first pass after an upgrade: the controller path answers)."""
    from reconciler.cli import operate, startup_view
    from reconciler.shell.gates import bench_results

    root = Path(state) / name
    st, det = _json(root / "status.json"), _json(root / FILE)
    if not isinstance(st, dict) or not isinstance(det, dict) or st.get("phase") == "Deleted":
        return None
    workers = [w for w in st.get("workers") or [] if isinstance(w, dict)]
    annotate(workers, det.get("units") if isinstance(det.get("units"), dict) else {})
    bench = {"state": det.get("benchmarkState"), "last": bench_results.last(Path(state), name)}
    scale = _json(root / "autoscale.json")
    quarantine = _json(Path(state) / "quarantine.json")
    quarantined = quarantine.get("quarantined") if isinstance(quarantine, dict) else None
    return {"name": name, "phase": st.get("phase", "Unknown"), "endpoint": st.get("endpoint"),
            "servedModel": st.get("servedModel"),
            "benchmark": bench if bench["state"] or bench["last"] else None,
            "suspended": bool(det.get("suspended")), "warning": st.get("warning"),
            "rename": ({"reason": st["reason"], "message": st.get("reasonMessage")}
                       if st.get("reason") in RENAME_REASONS else None),
            "error": det.get("error"),
            "conditions": [c for c in st.get("conditions") or [] if isinstance(c, dict)], "units": workers,
            "allocations": allocations(det.get("allocations") or [], now),
            "events": operate.read_events(Path(state), name)[-20:],
            "lastAllocationLost": st.get("lastAllocationLost") if isinstance(st.get("lastAllocationLost"), dict) else None,
            "quarantinedNodes": {n: {"until": q.get("untilIso"), "why": q.get("why")}
                                 for n, q in (quarantined or {}).items()
                                 if isinstance(q, dict) and float(q.get("until") or 0) > now},
            "autoscale": scale if isinstance(scale, dict) and isinstance(scale.get("last"), dict) else None,
            "startup": startup_view.summary(_json(root / startup_view.FILE)),
            "recordedAt": st.get("updatedAt")}
