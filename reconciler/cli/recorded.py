"""`get` from what the running `run` recorded (state/<recipe>/status.json and its neighbours),
without the controller: no manifest parsing, no desired-state build, no squeue.

`run` rewrites a recipe's status.json on every change it sees, so while it runs the file *is* the
answer, and reading it costs a few file reads however many deployments there are (the controller
path cost ~1 s of imports and a whole pass). This module imports only the standard library and
leaf modules (the CLI's import test keeps it so). When no `run` holds the state directory, `get`
looks at the cluster itself (cli/deployments.py): nothing records then.
"""

from __future__ import annotations

import calendar
import json
import time
from pathlib import Path
from typing import Any

from reconciler.cli import autoscale_view, startup_view
from reconciler.errors import ReconcilerError
from reconciler.recipe import namespaces
from reconciler.shell.gates import bench_results

AUTOSCALE = "autoscale.json"  # shell/autoscale.py's record


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def statuses(state: Path) -> dict[str, dict]:
    """recipe key -> its status.json, for every recipe `run` keeps a status of (Deleted ones left out)."""
    out = {}
    for p in sorted(Path(state).glob("*/status.json")):
        st = _json(p)
        if isinstance(st, dict) and st.get("phase") != "Deleted":
            out[p.parent.name] = st
    return out


def has(state: Path, names: tuple[str, ...]) -> bool:
    """Whether the record holds every one of ``names`` (all of them when none is named)."""
    recorded = statuses(state)
    return all(namespaces.from_ref(n) in recorded for n in names)


def rows(state: Path, names: tuple[str, ...], manifests: str, now: float | None = None) -> list[dict]:
    """`get`'s rows (the keys cli/deployments.get_rows gives) from the recorded statuses."""
    now = time.time() if now is None else now
    recorded = statuses(state)
    keys = sorted(recorded)
    if names:
        wanted = [namespaces.from_ref(n) for n in names]
        missing = [namespaces.display(n) for n in wanted if n not in recorded]
        if missing:
            raise ReconcilerError(f"no recipe named {', '.join(missing)} in {manifests}")
        keys = [k for k in keys if k in wanted]
    declared = _declared(state)
    out = []
    for k in keys:
        r = row(state, k, recorded[k], now)
        if declared is not None and k not in declared and not r["warning"] and r["status"] != "Terminating":
            # no file declares it any more, yet `run` has recorded neither what the prune guard keeps
            # (ManifestMissing, with its warning) nor its teardown: between two of its passes
            r.update(status="ManifestMissing", reason=r["reason"] or "ManifestMissing",
                     error="manifest missing: its workloads still run; `run` cancels them at its next pass, or "
                           "keeps them when every manifest is gone (the prune guard: `reconciler prune NAME`)")
        out.append(r)
    return out


def _declared(state: Path) -> set[str] | None:
    """Every recipe key a manifest file declared at `run`'s last read (files.json), None if unknown."""
    files = _json(Path(state) / "files.json")
    if not isinstance(files, dict):
        return None
    return {n for v in files.values() for n in ([v] if isinstance(v, str) else v if isinstance(v, list) else [])}


def row(state: Path, key: str, st: dict, now: float) -> dict:
    ns, name = namespaces.split(key)
    conds = [c for c in st.get("conditions") or [] if isinstance(c, dict)]
    invalid = next((c["message"] for c in conds if c.get("type") == "Invalid" and c.get("status") == "True"), None)
    warning = st.get("warning") if isinstance(st.get("warning"), dict) else None
    if warning:  # kept by the prune guard: its Invalid condition says why, and it is no spec error
        invalid = None
    error = invalid or st.get("error")
    status = "Invalid" if invalid else ("Error" if st.get("error") else st.get("phase", "Unknown"))
    workers = [w for w in st.get("workers") or [] if isinstance(w, dict)]
    roles = st.get("roles") or {}
    created = _parse_iso(st.get("createdAt"))
    pending = [p for p in st.get("pendingAllocations") or [] if isinstance(p, dict)]
    return {
        "name": name, "namespace": ns, "key": key, "status": status,
        "roles": {r: c for r, c in roles.items() if r != "frontend"}, "replicas": st.get("replicas"),
        "endpoint": st.get("endpoint"), "servedModel": st.get("servedModel"),
        "restarts": sum(int(w.get("restarts") or 0) for w in workers),
        "age_seconds": int(now - created) if created else None, "conditions": conds,
        "error": error,
        # Slurm's reasons for the recipe's queued allocations, as `run` last saw them
        "waitingForAllocation": ", ".join(sorted({str(p.get("reason") or "") for p in pending} - {""}))
        if pending else None,
        "reason": st.get("reason") or ("InvalidSpec" if error else None), "reasonMessage": st.get("reasonMessage"),
        "nodes": sorted({n for w in workers for n in w.get("nodes") or []}),
        "pendingAllocations": pending,
        "autoscale": autoscale(_json(Path(state) / key / AUTOSCALE), roles),
        "startup": startup_view.summary(_json(Path(state) / key / startup_view.FILE)),
        "benchmark": bench_results.brief(bench_results.last(Path(state), key)),
        "recordedAt": st.get("updatedAt"),
        "warning": warning,
    }


def autoscale(doc: Any, roles: dict) -> dict | None:
    """role -> {desired, current, min, max, draining, reason, ...} from autoscale.json (None: not
    autoscaled, or not decided yet); ``current`` is the Ready count of the recorded status."""
    if not isinstance(doc, dict) or not isinstance(doc.get("last"), dict):
        return None
    out = {}
    for role, last in doc["last"].items():
        if isinstance(last, dict):
            out[role] = {"desired": last.get("target"),
                         "current": autoscale_view.serving_ready((roles.get(role) or {}).get("ready"), last),
                         "min": last.get("min"), "max": last.get("max"), "draining": last.get("draining") or [],
                         "reason": last.get("reason"), "at": last.get("at"), "coming": last.get("coming") or [],
                         "held": last.get("held", 0), "spares": autoscale_view.spares(last)}
    return out or None


def _parse_iso(s: Any) -> float | None:
    if not isinstance(s, str) or not s:
        return None
    try:
        return calendar.timegm(time.strptime(s, "%Y-%m-%dT%H:%M:%SZ"))
    except ValueError:
        return None
