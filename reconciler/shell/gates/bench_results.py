"""A deployment's benchmark runs as the step left them: ``state/<recipe>/benchmarks/<run>.json``
(the summary ``python -m reconciler.benchrun`` writes last, atomically) beside ``<run>/`` (aiperf's
raw artifacts). Read by ``describe``, ``get -o json``, ``benchmarks NAME`` and the metrics; nothing
here decides anything."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

MAX_HISTORY = 200  # summaries read for `benchmarks NAME` (the newest)
BRIEF = ("run", "status", "reason", "type", "subject", "req_s", "output_tok_s", "ttft_p50_ms", "ttft_p99_ms",
         "itl_p50_ms", "itl_p99_ms", "errors", "output_tokens", "duration_s", "ended")


def bench_dir(state_root: Path, name: str) -> Path:
    return Path(state_root) / name / "benchmarks"


def history(state_root: Path, name: str, limit: int = MAX_HISTORY) -> list[dict[str, Any]]:
    """The runs' summaries, oldest first (run names start with their UTC start time)."""
    files = sorted(bench_dir(state_root, name).glob("*.json"))[-limit:]
    out = []
    for f in files:
        try:
            doc = json.loads(f.read_text())
        except (OSError, ValueError):
            continue  # a file someone else wrote there: not a summary
        if isinstance(doc, dict) and "status" in doc:
            out.append(doc)
    return out


def last(state_root: Path, name: str) -> dict[str, Any] | None:
    runs = history(state_root, name, limit=5)
    return runs[-1] if runs else None


def brief(doc: dict[str, Any] | None) -> dict[str, Any] | None:
    """The headline of one run (what `get -o json` and `describe -o json` carry)."""
    return None if doc is None else {k: doc.get(k) for k in BRIEF}


def _num(v: Any, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def line(doc: dict[str, Any]) -> str:
    """One run in words."""
    conc = "x".join(str(lv.get("concurrency")) for lv in doc.get("levels", []))
    head = (f"{doc['status']} {doc.get('run', '')} {doc.get('type', '')} at concurrency {conc or '-'}: "
            f"{_num(doc.get('req_s'), '.2f')} req/s, {_num(doc.get('output_tok_s'), '.1f')} output tok/s, "
            f"TTFT p50/p99 {_num(doc.get('ttft_p50_ms'), '.1f')}/{_num(doc.get('ttft_p99_ms'), '.1f')} ms, "
            f"ITL p50/p99 {_num(doc.get('itl_p50_ms'), '.2f')}/{_num(doc.get('itl_p99_ms'), '.2f')} ms, "
            f"{doc.get('errors', 0)} errors, {doc.get('output_tokens', 0)} output tokens, "
            f"{_num(doc.get('duration_s'), '.1f')} s, spec {str(doc.get('subject', ''))[:12]}")
    return head + (f" ({doc['reason']})" if doc.get("reason") else "")


def now_state(desired_recipe, observed, recipe_plan) -> str | None:
    """Whether a run is in flight or why none is (None: the recipe runs no benchmark)."""
    from reconciler.desired.sources.benchmark import ROLE

    units = [u for u in (desired_recipe.services if desired_recipe else ()) if u.role == ROLE]
    if not units:
        return None
    if any(s.role == ROLE and not s.pending for s in observed.steps_of(desired_recipe.name)):
        return "running"
    wait = recipe_plan.waiting.get(units[0].name) if recipe_plan else None
    if wait is None:
        return "starting"
    return wait.reason.value + (f": {wait.detail}" if wait.detail else "")


class Announcer:
    """An event per finished run (``BenchmarkSucceeded`` / ``BenchmarkFailed`` / ``BenchmarkCancelled``),
    once: a run that ended before this process started was announced by the one before it."""

    def __init__(self, started: float):
        self.started = started
        self.seen: dict[str, str] = {}  # recipe -> the last run announced (or found)

    def tick(self, state, names: list[str]) -> dict[str, dict[str, Any]]:
        """``names``: the recipes that run a benchmark. Returns each one's last run (for the metrics)."""
        out = {}
        for name in names:
            doc = last(state.root, name)
            if doc is None:
                continue
            out[name] = doc
            run = str(doc.get("run"))
            if self.seen.get(name) == run:
                continue
            self.seen[name] = run
            ended = doc.get("ended")
            if isinstance(ended, (int, float)) and ended >= self.started:
                state.event(f"Benchmark{doc['status']}", name, line(doc), run=run)
        for gone in set(self.seen) - set(names):
            del self.seen[gone]
        return out
