"""The status page's document (GET /api/status): built from what `run` recorded in state/ and its
last snapshot, after each tick, on the loop's thread; served as it is by the HTTP thread."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from reconciler.recipe import namespaces
from reconciler.timefmt import iso
from reconciler.shell.gates import bench_results
from reconciler.shell.elastic import startup_log
from reconciler.shell.elastic.autoscale import FILE as AUTOSCALE_FILE

DECISIONS_SHOWN = 50  # the newest autoscaler decisions across deployments

EVENTS_TAIL = 64 << 10  # bytes of events.jsonl read for "recent events"
ROLES = ("prefill", "decode", "agg")


def recent_events(state: Path, n: int = 30) -> list[dict]:
    """The last ``n`` events, newest first, from the end of events.jsonl only."""
    path = Path(state) / "events.jsonl"
    try:
        with path.open("rb") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(0, size - EVENTS_TAIL))
            lines = f.read().decode(errors="replace").splitlines()[1 if size > EVENTS_TAIL else 0:]
    except OSError:
        return []
    out = []
    for line in reversed(lines):
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if isinstance(e, dict):
            out.append({k: e.get(k) for k in ("time", "kind", "recipe", "message")})
        if len(out) >= n:
            break
    return out


def unit_row(w: dict, launch: dict) -> dict:
    return {
        "name": w.get("name"), "role": w.get("role"), "phase": w.get("phase"), "ready": bool(w.get("ready")),
        "nodes": w.get("nodes") or [], "ports": w.get("ports") or {}, "steps": w.get("steps") or [],
        "life": launch.get("launches", 0), "restarts": w.get("restarts", 0),
        "reason": w.get("reason"), "message": w.get("message"), "lastExit": w.get("lastExit"),
        "since": iso(launch["lastLaunch"]) if isinstance(launch.get("lastLaunch"), (int, float)) else None,
    }


def deployment(name: str, st: dict, launches: dict[str, dict], benchmark: dict | None) -> dict:
    workers = st.get("workers") or []
    ready_cond = next((c for c in st.get("conditions", []) if c.get("type") == "Ready"), {})
    prog = next((c for c in st.get("conditions", []) if c.get("type") == "Progressing"), {})
    avail = next((c for c in st.get("conditions", []) if c.get("type") == "Available"), {})
    return {
        # name: the key (state/ paths, the page's anchors); shown: as users write it, FOLDER/NAME
        "name": name, "shown": namespaces.display(name), "phase": st.get("phase", "Unknown"),
        "endpoint": st.get("endpoint"), "servedModel": st.get("servedModel"),
        "roles": st.get("roles") or {}, "reason": st.get("reason"), "reasonMessage": st.get("reasonMessage"),
        "createdAt": st.get("createdAt"), "readySince": ready_cond.get("lastTransitionTime")
        if ready_cond.get("status") == "True" else None,
        "progress": prog.get("message") if prog.get("status") == "True" else None,
        # kubectl's Available: whether it serves (a planned rollout keeps it), and since when
        "available": avail.get("status") == "True" if avail else None, "availableMessage": avail.get("message"),
        "availableSince": avail.get("lastTransitionTime"), "replicas": st.get("replicas"),
        "error": st.get("error"),
        # shown and serving, but not acted on (the prune guard keeps it: its file is gone)
        "warning": st.get("warning") if isinstance(st.get("warning"), dict) else None,
        "workers": [unit_row(w, launches.get(w.get("name"), {})) for w in workers if w.get("role") in ROLES],
        "services": [unit_row(w, launches.get(w.get("name"), {})) for w in workers if w.get("role") not in ROLES],
        "benchmark": benchmark,
    }


def build(ctl, names: list[str], settings: dict) -> dict:
    """Everything the page shows except the plots (see ui.server for those)."""
    sd = ctl.state
    deps = []
    for name in sorted(names):
        st = sd.status(name)
        if not st or st.get("phase") == "Deleted":
            continue
        bench = bench_results.brief(bench_results.last(sd.root, name))  # the last run (reconcile.benchmark)
        deps.append(deployment(name, st, sd.launches(name), bench))
        deps[-1]["startup"] = startup_log.summary(sd, name) or None  # launch-to-Ready per role
    return {
        "generatedAt": iso(time.time()), "settings": settings,
        "controller": {"ticks": ctl.ticks, "actions": ctl.actions_done, "tickFailures": ctl.tick_failures},
        "deployments": deps, "events": recent_events(sd.root),
        "autoscaler": autoscaler(sd, [d["name"] for d in deps]),
    }


def autoscaler(sd, names: list[str]) -> dict:
    """What the autoscaler (shell/elastic/autoscale.py) last decided per autoscaled deployment and role, with
    what it measured, and its recent count changes, newest first. ``available``: some deployment is
    autoscaled and has been looked at (reconcile.autoscale); the page says so otherwise."""
    roles: dict[str, dict] = {}
    decisions: list[dict] = []
    for name in names:
        doc = sd.read_json(sd.path_of(name, AUTOSCALE_FILE), None, lambda d: isinstance(d, dict))
        last = doc.get("last") if doc else None
        if not isinstance(last, dict):
            continue
        roles[name] = {role: {"desired": v.get("target"), "built": v.get("built"), "ready": v.get("ready"),
                              "min": v.get("min"), "max": v.get("max"), "reason": v.get("reason"),
                              "at": v.get("at"), "inputs": v.get("inputs") or {}, "draining": v.get("draining") or [],
                              "held": v.get("held", 0), "spares": v.get("spares") or []}
                       for role, v in last.items() if isinstance(v, dict)}
        for d in doc.get("decisions") or []:
            if isinstance(d, dict):
                decisions.append({"recipe": name, "shown": namespaces.display(name),
                                  **{k: d.get(k) for k in ("at", "role", "from", "to", "reason", "inputs")}})
    decisions.sort(key=lambda d: str(d.get("at") or ""), reverse=True)
    return {"available": bool(roles), "deployments": roles, "decisions": decisions[:DECISIONS_SHOWN]}
