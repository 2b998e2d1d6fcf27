"""The status page's document (GET /api/status) from what `run` recorded: the autoscaler section
shows the autoscaler's own file (state/<recipe>/autoscale.json), never a fixed "none"."""

from __future__ import annotations

import json
from types import SimpleNamespace

from reconciler.drivers.state import StateDir
from reconciler.ui import model
from reconciler.ui.page import PAGE

# the shape shell/elastic/autoscale.py writes (its "last" per role and the decisions' history)
AUTOSCALE = {
    "recipe": "r", "roles": {"agg": {"target": 1, "built": 1}},
    "last": {"agg": {"at": "2026-12-06T10:00:30Z", "ask": 1, "reason": "steady", "inputs": {"waiting": 0},
                     "ready": 1, "target": 1, "built": 1, "min": 1, "max": 4, "draining": [], "coming": []}},
    "decisions": [
        {"at": "2026-12-06T10:00:00Z", "role": "agg", "from": 1, "to": 4, "reason": "waiting_per_worker 6 > 2",
         "inputs": {"waiting": 12}},
        {"at": "2026-12-06T10:00:20Z", "role": "agg", "from": 4, "to": 1, "reason": "idle for 8 s",
         "inputs": {"waiting": 0}},
    ],
    "wake": None,
}


def _ctl(root):
    return SimpleNamespace(state=StateDir(root), ticks=3, actions_done=0, tick_failures=0)


def _status(root, name: str) -> None:
    (root / name).mkdir(parents=True, exist_ok=True)
    (root / name / "status.json").write_text(json.dumps({"name": name, "phase": "Ready", "conditions": [],
                                                        "workers": [], "roles": {}}))


def test_the_autoscaler_section_is_the_autoscalers_state_and_decisions(tmp_path):
    _status(tmp_path, "r")
    _status(tmp_path, "fixed")  # not autoscaled: not listed
    (tmp_path / "r" / "autoscale.json").write_text(json.dumps(AUTOSCALE))
    doc = model.build(_ctl(tmp_path), ["r", "fixed"], {})
    a = doc["autoscaler"]
    assert a["available"] is True and set(a["deployments"]) == {"r"}
    agg = a["deployments"]["r"]["agg"]
    assert (agg["desired"], agg["ready"], agg["min"], agg["max"], agg["reason"]) == (1, 1, 1, 4, "steady")
    assert [(d["from"], d["to"]) for d in a["decisions"]] == [(4, 1), (1, 4)]  # newest first
    assert a["decisions"][0]["recipe"] == "r" and a["decisions"][1]["inputs"] == {"waiting": 12}
    json.dumps(doc)  # served as it is


def test_no_autoscaled_deployment_says_so(tmp_path):
    _status(tmp_path, "fixed")
    a = model.build(_ctl(tmp_path), ["fixed"], {})["autoscaler"]
    assert a == {"available": False, "deployments": {}, "decisions": []}
    assert "no deployment is autoscaled" in PAGE and "no autoscaler is configured" not in PAGE
    assert "autoscale-decisions" in PAGE  # the page draws the decisions it is given


def test_each_deployment_carries_its_measured_startup(tmp_path):
    _status(tmp_path, "r")
    _status(tmp_path, "new")  # nothing launched yet: no startup file, nothing shown
    summary = {"agg": {"p50": 30.0, "p90": 33.0, "lives": 2, "last": 31.0, "routedP90": 40.0, "source": "measured",
                       "text": "startup p90 33s, p50 30s (measured over 2 lives)"}}
    (tmp_path / "r" / "startup.json").write_text(json.dumps({"recipe": "r", "budget": 1800, "roles": {}, "summary": summary}))
    deps = {d["name"]: d for d in model.build(_ctl(tmp_path), ["r", "new"], {})["deployments"]}
    assert deps["r"]["startup"] == summary and deps["new"]["startup"] is None
    assert "function startup(s)" in PAGE and "${startup(d.startup)}" in PAGE  # drawn on each deployment's card
