"""Rollout analysis (``reconcile.rollout.analysis``): a surging worker's new life is measured on
its own address before it takes a request, and replaces the old life only if it passes. Pure.

Facts in: ``Observed.analysis`` — per (recipe, role, spec hash) the finished runs of lives of that
spec (reconciler.benchrun summaries, each with the ``index`` of the unit measured, the spec it was
compared with, ``against`` (an old life's run: its own), and the recipe's ``generation`` it was
measured for). A spec hash is one life's (its ports are in its argv): a baseline is per worker.
Decisions out, per surging worker:

- the baseline: the old spec's last run (any index; a passing run of an earlier rollout's new life
  counts). None: the old life is measured first, the same way, while the new one starts;
- then the new life, once Ready, at its own address — held out of every router until it passes
  (``held``, read by shell/readiness/router_sync.py and the endpoints file);
- the verdict (``judge``): its run valid (benchrun's checks: output tokens, errors, lengths), TTFT p90
  at most ``max_ttft_p90_ms``, output tokens/s at least ``min_throughput_ratio`` of the old life's.
  Passed: the hand-over clock (pick-up, drain) starts when the run ended (``handover_start``).
  Failed: the new life is cancelled, the old life serves on, and no new life of the role is started
  again for that generation of the recipe (the runs are kept in state/): only a changed recipe file
  (a new generation, new spec hashes) rolls again.

Only a worker's surge is analysed: a frontend's or service's new life has no old one beside it
to compare with. A worker that serves no HTTP API of its own (a Dynamo worker: its frontend finds
it through etcd at start, so ``held`` could not keep it out either) or does not answer alone (a
prefill or decode worker) cannot be measured: admission refuses the key for such recipes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reconciler.core.plan.results import Measure
from reconciler.world import FRONTEND, Analysis, DesiredRecipe, Observed, Step, Unit, UnitHealth

NEW, OLD = "new", "old"
SUCCEEDED = "Succeeded"  # reconciler.benchrun.summary's status of a valid run

Doc = Mapping[str, Any]


def applies(d: DesiredRecipe, u: Unit) -> bool:
    """A worker that serves HTTP at its own address (admission refuses analysis for any other)."""
    return (d.analysis is not None and not u.is_service and u.role != FRONTEND and not u.run_once
            and u.probe == "http" and u.url is not None)


def _runs(o: Observed, recipe: str, role: str, spec: str) -> tuple[Doc, ...]:
    return o.analysis.get((recipe, role, spec), ())


def baseline(o: Observed, recipe: str, role: str, old_spec: str) -> Doc | None:
    """The old spec's last run: the newest valid one, else the newest (a broken old life)."""
    runs = _runs(o, recipe, role, old_spec)
    good = [r for r in runs if r.get("status") == SUCCEEDED]
    return max(good or runs, key=lambda r: r.get("ended") or 0.0, default=None)


def new_run(d: DesiredRecipe, o: Observed, u: Unit, old_spec: str) -> Doc | None:
    """The new life's run against this old spec for this generation of the recipe (its own index:
    each life is measured). A run of an earlier generation is no verdict now: a file changed in
    what does not reach this worker's argv (same spec hash) measures it again."""
    runs = [r for r in _runs(o, d.name, u.role, u.spec_hash) if r.get("against") == old_spec
            and r.get("index") == u.index and r.get("generation") == d.generation]
    return max(runs, key=lambda r: r.get("ended") or 0.0, default=None)


def _fmt(v: Any, spec: str = ".1f") -> str:
    return "-" if not isinstance(v, (int, float)) else format(v, spec)


def p90(doc: Doc) -> float | None:
    levels = doc.get("levels") or [{}]
    v = levels[-1].get("ttft_p90_ms")
    return float(v) if isinstance(v, (int, float)) else None


def judge(a: Analysis, new: Doc, old: Doc | None) -> tuple[bool, str]:
    """(passed, the figures in words)."""
    tput, ttft = new.get("output_tok_s"), p90(new)
    base = old.get("output_tok_s") if old is not None and old.get("status") == SUCCEEDED else None
    ratio = tput / base if isinstance(tput, (int, float)) and isinstance(base, (int, float)) and base > 0 else None
    figures = (f"new life {_fmt(tput)} output tok/s, TTFT p90 {_fmt(ttft)} ms; old life "
               + (f"{_fmt(base)} output tok/s, TTFT p90 {_fmt(p90(old))} ms; "  # type: ignore[arg-type]
                  f"ratio {_fmt(ratio, '.2f')}" if base is not None else "not measured validly (no ratio)"))
    why = []
    if new.get("status") != SUCCEEDED:
        why.append(f"its run failed: {new.get('reason') or new.get('status')}")
    if a.max_ttft_p90_ms is not None and (ttft is None or ttft > a.max_ttft_p90_ms):
        why.append(f"TTFT p90 {_fmt(ttft)} ms > max_ttft_p90_ms {a.max_ttft_p90_ms:g}")
    if a.min_throughput_ratio is not None and ratio is not None and ratio < a.min_throughput_ratio:
        why.append(f"throughput ratio {ratio:.2f} < min_throughput_ratio {a.min_throughput_ratio:g}")
    return not why, "; ".join([*why, figures])


def failed(d: DesiredRecipe, o: Observed, role: str) -> str | None:
    """Why a new life of ``role`` failed its analysis in this generation of the recipe (any index:
    one failure stops the role's rollout), or None."""
    for (recipe, r_role, spec), runs in o.analysis.items():
        if recipe != d.name or r_role != role or d.analysis is None:
            continue
        for r in runs:
            if r.get("generation") == d.generation and r.get("against") not in (None, spec):
                ok, figures = judge(d.analysis, r, baseline(o, d.name, role, str(r["against"])))
                if not ok:
                    return f"{role}_{r.get('index')}: {figures}"
    return None


def old_spec_of(steps: list[Step] | tuple[Step, ...], u: Unit) -> str | None:
    """The spec of the unit's old life beside it (a step in its other slot on an older spec)."""
    return next((s.spec_hash for s in steps if (s.role, s.index) == (u.role, u.index) and s.slot != u.slot
                 and s.spec_hash != u.spec_hash), None)


def passed_at(d: DesiredRecipe, o: Observed, u: Unit, old_spec: str) -> float | None:
    """When the new life's run ended, if it passed."""
    run = new_run(d, o, u, old_spec)
    if run is None or d.analysis is None:
        return None
    ok, _ = judge(d.analysis, run, baseline(o, d.name, u.role, old_spec))
    return float(run.get("ended") or 0.0) if ok else None


def handover_start(d: DesiredRecipe, o: Observed, u: Unit, old_spec: str | None, h: UnitHealth | None) -> float | None:
    """When the surge hand-over clock starts: the new life's first Ready, and with analysis not
    before its run passed (None: not yet)."""
    first = h.first_ready if h is not None else None
    if first is None or old_spec is None or not applies(d, u):
        return first
    at = passed_at(d, o, u, old_spec)
    return None if at is None else max(first, at)


def held(d: DesiredRecipe, o: Observed, u: Unit) -> bool:
    """A surging worker's new life that has not passed its analysis takes no request."""
    if not applies(d, u) or (u.role, u.index) not in d.previous:
        return False
    old = old_spec_of(o.steps_of(d.name), u)
    return old is not None and passed_at(d, o, u, old) is None


def next_measure(d: DesiredRecipe, o: Observed, u: Unit, old_spec: str, new_ready: bool) -> Measure | None:
    """What to measure now for this surge: the old life when the old spec has no run yet (at once:
    it serves while the new one starts), then the new life once Ready; None: both are there."""
    prev = d.previous.get((u.role, u.index))
    if baseline(o, d.name, u.role, old_spec) is None:
        return (Measure(d.name, u.role, u.index, old_spec, old_spec, prev.url, OLD, d.generation)
                if prev is not None and prev.url else None)
    if new_ready and new_run(d, o, u, old_spec) is None and u.url:
        return Measure(d.name, u.role, u.index, u.spec_hash, old_spec, u.url, NEW, d.generation)
    return None
