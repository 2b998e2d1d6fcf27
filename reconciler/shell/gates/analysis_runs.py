"""Rollout analysis, the edge: runs the measurements the plan asks for and reads their results back
as facts (core/plan/analysis.py decides everything).

A measurement is ``python -m reconciler.benchrun`` (aiperf, the benchmark step's own runner) on this
host, pointed at one life's own address, one at a time per recipe. Its summary lands in
``state/<recipe>/analysis/<role>/<spec hash>/<index>/<run>.json`` (the spec of the life measured;
the summary's ``subject`` is ``<old spec it is compared with>@<recipe generation>``), raw artifacts beside. The runs are
kept: a failed spec's verdict must outlive this process, and the next rollout's baseline is the last
passing run. A measurement in flight is recorded in ``running.json`` (pid and what it measures) so
that a restarted controller adopts it rather than starting a second one beside it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import structlog

from reconciler.core.plan import analysis
from reconciler.core.plan.results import Measure, Plan
from reconciler.drivers.state import StateDir
from reconciler.world import Desired, Observed, Step

log = structlog.get_logger("reconciler")
FINISHED = ("Succeeded", "Failed")  # a Cancelled run (stopped by us) is no verdict: measured again


def run_dir(root: Path, m: Measure) -> Path:
    return Path(root) / m.recipe / "analysis" / m.role / m.spec / str(m.index)


Runs = dict[tuple[str, str, str], tuple[dict[str, Any], ...]]  # (recipe, role, spec) -> finished runs


def read_runs(root: Path, name: str, specs: set[str] | None = None) -> Runs:
    """(recipe, role, spec) -> the finished runs under state/<recipe>/analysis/, each with its index
    and ``file`` (where it was read from). ``specs``: only these (what runs or is desired now: the
    runs of every spec a deployment ever had are kept, but only those are read each tick)."""
    out: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for f in sorted((Path(root) / name / "analysis").glob("*/*/*/*.json")):
        if specs is not None and f.parent.parent.name not in specs:
            continue
        try:
            doc = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(doc, dict) or doc.get("status") not in FINISHED or not f.parent.name.isdigit():
            continue
        role, spec = f.parent.parent.parent.name, f.parent.parent.name
        against, _, gen = str(doc.get("subject", "")).partition("@")
        out.setdefault((name, role, spec), []).append({**doc, "index": int(f.parent.name), "file": str(f),
                                                       "against": against, "generation": gen})
    return {k: tuple(v) for k, v in out.items()}


def _alive(pid: int) -> bool:
    try:
        return b"reconciler.benchrun" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


class Analyzer:
    def __init__(self, state: StateDir, started: float):
        self.state = state
        self.started = started  # runs that ended before this process started were announced by the one before
        self.seen: set[str] = set()
        self.runs: Runs = {}
        self.stopped: set[int] = set()  # runner pids sent SIGTERM

    def facts(self, desired: Desired, steps: Iterable[Step] = ()) -> Runs:
        """The finished runs of every recipe that has a rollout analysis (``Observed.analysis``), of
        the specs its steps run and its units want (an old life's baseline, a new life's verdict)."""
        running: dict[str, set[str]] = {}
        for st in steps:
            running.setdefault(st.recipe, set()).add(st.spec_hash)
        out: Runs = {}
        for name, d in desired.recipes.items():
            if d.analysis is not None:
                out |= read_runs(self.state.root, name, running.get(name, set()) | {u.spec_hash for u in d.units})
        self.runs = out
        return out

    def _pidfile(self, recipe: str) -> Path:
        return self.state.root / recipe / "analysis" / "running.json"

    def _running(self, recipe: str) -> tuple[int, Measure] | None:
        doc = self.state.read_json(self._pidfile(recipe), None, lambda x: isinstance(x, dict))
        if not doc or not _alive(int(doc.get("pid", 0))):
            self._pidfile(recipe).unlink(missing_ok=True)  # ended (its summary is written): nothing runs
            return None
        return int(doc["pid"]), Measure(**doc["measure"])

    def tick(self, plan: Plan, desired: Desired) -> None:
        """Start what the plan asks for (the first measurement of each recipe), stop what it no
        longer asks for (a new life judged dead, a recipe changed again), then announce verdicts."""
        try:
            self._tick(plan, desired)
        except OSError as e:  # a measurement that cannot start is asked for again next tick
            log.error("rollout analysis: cannot start or stop a measurement", error=str(e))

    def _tick(self, plan: Plan, desired: Desired) -> None:
        for name in sorted(set(plan.recipes) | {p.parent.parent.name for p in
                                               self.state.root.glob("*/analysis/running.json")}):
            rp = plan.recipes.get(name)
            want = rp.measure[0] if rp is not None and rp.measure else None
            cur = self._running(name)
            if cur is not None and cur[1] != want:
                if cur[0] not in self.stopped:  # once: it takes a moment to stop aiperf and write its summary
                    self.stopped.add(cur[0])
                    os.kill(cur[0], signal.SIGTERM)  # the runner stops aiperf and records the run Cancelled
                    self.state.event("AnalysisStopped", name, f"measuring {cur[1].unit} ({cur[1].life} life) "
                                     "is no longer wanted: stopped")
            elif cur is None and want is not None and (d := desired.recipes.get(name)) and d.analysis \
                    and not self._done(want):
                self._start(want, d.analysis.plan)
        self._announce(desired)

    def _done(self, m: Measure) -> bool:
        """Its run ended after this tick's facts were read (the plan asked from those): not again."""
        runs = read_runs(self.state.root, m.recipe).get((m.recipe, m.role, m.spec), ())
        return any(m.life == analysis.OLD or (r["index"] == m.index and r["against"] == m.against
                                              and r["generation"] == m.generation) for r in runs)

    def _start(self, m: Measure, plan: str) -> None:
        out = run_dir(self.state.root, m)
        out.mkdir(parents=True, exist_ok=True)
        argv = [sys.executable, "-m", "reconciler.benchrun", "--url", m.url, "--out", str(out),
                "--subject", f"{m.against}@{m.generation}", "--plan", plan]
        with open(out / "runner.log", "ab") as logf:
            p = subprocess.Popen(argv, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 start_new_session=True)  # its own group: a controller's ^C is not its end
        self.state.write_json(self._pidfile(m.recipe), {"pid": p.pid, "measure": m.__dict__})
        log.info("rollout analysis: measuring", recipe=m.recipe, unit=m.unit, life=m.life, url=m.url)
        self.state.event("AnalysisStarted", m.recipe, f"measuring {m.unit}'s {m.life} life (spec {m.spec[:12]}) "
                         f"at its own address {m.url}")

    def _announce(self, desired: Desired) -> None:
        """One event per finished run: the old life's baseline, or the new life's verdict."""
        for (name, role, spec), runs in self.runs.items():
            d = desired.recipes.get(name)
            for r in runs:
                if r["file"] in self.seen:
                    continue
                self.seen.add(r["file"])
                if d is None or d.analysis is None or not (r.get("ended") or 0) >= self.started:
                    continue
                unit = f"{role}_{r['index']}"
                if r["against"] == spec:
                    self.state.event("AnalysisBaseline", name, f"{unit}'s old life (spec {spec[:12]}): {r['status']}, "
                                     f"{_num(r.get('output_tok_s'))} output tok/s, TTFT p90 "
                                     f"{_num(analysis.p90(r))} ms")
                    continue
                base = analysis.baseline(Observed(analysis=self.runs), name, role, r["against"])
                ok, figures = analysis.judge(d.analysis, r, base)
                self.state.event("AnalysisPassed" if ok else "RolloutFailed", name,
                                 f"{unit}'s new life (spec {spec[:12]}): {figures}"
                                 + ("" if ok else "; the new life stops, the old one keeps serving"))


def _num(v: Any) -> str:
    return f"{v:.1f}" if isinstance(v, (int, float)) else "-"
