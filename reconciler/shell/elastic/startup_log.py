"""The measured startup's edge: note each life's launch-to-Ready (and first request) in
state/<recipe>/startup.json, and read it back as the autoscaler's ``Startup`` per role.

A life counts when this process saw it from its launch (as the hand-over time's ``readyAfter`` in
launches.json: a life found already running after a restart has no launch-to-Ready to measure).
The file keeps the last ``startup.KEEP`` lives per role, so it survives reconciler restarts and
follows a change of engine or model, and a ``summary`` per role (p50, p90, how many lives, the
health-check budget for a role with none) for the read commands, the status page and the metric,
which read it without the core. Written only when a life is noted (or the summary changes).
"""

from __future__ import annotations

from collections.abc import Mapping

from reconciler.core.plan import startup as su
from reconciler.drivers.state import StateDir
from reconciler.shell.snapshot import Snapshot

FILE = "startup.json"
SEEN_FROM_LAUNCH = 30.0  # seconds: first probed this long after the launch at most (record.py's rule)


class StartupLog:
    def __init__(self, state: StateDir):
        self.state = state
        self._noted: dict[tuple[str, str], float] = {}  # (recipe, unit) -> the launch of the life noted

    def history(self, name: str) -> dict[str, tuple[su.Life, ...]]:
        return su.from_json(self.state.read_json(self.state.path_of(name, FILE), {}, lambda d: isinstance(d, dict)))

    def startups(self, name: str, roles: list[str], budget: float) -> dict[str, su.Startup]:
        """Each role's startup: its measured lives, or the health-check budget (``budget``)."""
        h = self.history(name)
        return {role: su.estimate(h.get(role, ()), budget) for role in roles}

    def summary(self, name: str) -> dict[str, dict]:
        return summary(self.state, name)

    def note(self, snap: Snapshot) -> None:
        """Every life that became Ready since the last look, per recipe (one write per recipe at most)."""
        o = snap.observed
        for name, d in snap.desired.recipes.items():
            new: list[tuple[str, su.Life]] = []
            for u in d.units:
                h = o.health.get(u.key)
                if not (h and o.ready.get(u.key) and h.ready_since and h.last_launch and h.watched_since is not None
                        and h.watched_since - h.last_launch < SEEN_FROM_LAUNCH):
                    continue
                if self._noted.get((name, u.name)) == h.last_launch:
                    continue
                self._noted[(name, u.name)] = h.last_launch
                new.append((u.role, su.Life(u.name, h.last_launch, round(h.ready_since - h.last_launch, 3))))
            roles = sorted({u.role for u in d.units})
            path = self.state.path_of(name, FILE)
            if new or (roles and not path.exists()):
                self._write(name, roles, d.startup_grace, new)
        for key in [k for k in self._noted if k[0] not in snap.desired.recipes]:
            del self._noted[key]

    def routed(self, name: str, role: str, unit: str, launched: float, at: float) -> None:
        """The life of ``unit`` launched at ``launched`` was seen serving a request at ``at``."""
        h = self.history(name)
        lives = h.get(role, ())
        after = su.routed(lives, unit, launched, at)
        if after != lives:
            self._save(name, {**h, role: after}, None)

    def _write(self, name: str, roles: list[str], budget: float, new: list[tuple[str, su.Life]]) -> None:
        h = self.history(name)
        for role, life in new:
            h[role] = su.add(h.get(role, ()), life)
        self._save(name, h, (roles, budget))

    def _save(self, name: str, h: Mapping[str, tuple[su.Life, ...]], roles_budget: tuple[list[str], float] | None) -> None:
        path = self.state.path_of(name, FILE)
        if roles_budget is None:  # keep the roles and budget the file was written with
            doc = self.state.read_json(path, {}, lambda d: isinstance(d, dict))
            roles_budget = (list(doc.get("summary") or h), float(doc.get("budget") or 0.0))
        roles, budget = roles_budget
        summary = {role: brief(su.estimate(h.get(role, ()), budget)) for role in sorted({*roles, *h})}
        self.state.write_json(path, {"recipe": name, "budget": budget, **su.to_json(h), "summary": summary})


def summary(state: StateDir, name: str) -> dict[str, dict]:
    """role -> what the file's summary says of it ({} without a file)."""
    doc = state.read_json(state.path_of(name, FILE), {}, lambda d: isinstance(d, dict))
    s = doc.get("summary")
    return {r: v for r, v in s.items() if isinstance(v, dict)} if isinstance(s, dict) else {}


def brief(s: su.Startup) -> dict:
    """What the read commands, the page and the metric show of a role's startup."""
    return {"p50": s.p50, "p90": s.p90, "lives": s.lives, "last": s.last, "routedP90": s.routed_p90,
            "source": "measured" if s.lives else "budget", "text": s.describe()}
