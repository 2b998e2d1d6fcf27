"""The measured startup's edge without Slurm: lives noted from a snapshot's health into
state/<recipe>/startup.json (once each, only those seen from their launch, bounded, kept across a
restart of the reconciler), read back per role with the budget for a role with none; what the
holder is told (its hold and its 503's wait) and the metric; what get -o wide and describe print."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace as NS

from click.testing import CliRunner
import click

from reconciler.cli import startup_view
from reconciler.core.plan.startup import KEEP
from reconciler.drivers.state import StateDir
from reconciler.shell.elastic.startup_log import StartupLog
from reconciler.shell.gateway import wake_eta
from reconciler.shell.metrics import Metrics


def unit(role: str, i: int) -> NS:
    return NS(key=("r", role, i), role=role, name=f"{role}_{i}")


def health(launch: float, ready: float, watched: float | None = None) -> NS:
    return NS(last_launch=launch, ready_since=ready, watched_since=launch + 1 if watched is None else watched)


def snap(units: list[NS], healths: dict, ready: set, grace: float = 600.0) -> NS:
    d = NS(units=units, startup_grace=grace)
    o = NS(health={u.key: healths[u.name] for u in units if u.name in healths},
           ready={u.key: u.name in ready for u in units})
    return NS(desired=NS(recipes={"r": d}), observed=o)


def test_lives_are_noted_once_from_their_launch_and_read_back_after_a_restart(tmp_path: Path):
    state = StateDir(tmp_path)
    log = StartupLog(state)
    agg0, agg1, pre0 = unit("agg", 0), unit("agg", 1), unit("prefill", 0)
    # nothing Ready yet: the file says each role's bound, the budget
    log.note(snap([agg0, pre0], {}, set()))
    assert log.summary("r") == {
        "agg": {"p50": 600.0, "p90": 600.0, "lives": 0, "last": None, "routedP90": None, "source": "budget",
                "text": "startup <= 600s (health-check budget (no life measured yet))"},
        "prefill": {"p50": 600.0, "p90": 600.0, "lives": 0, "last": None, "routedP90": None, "source": "budget",
                    "text": "startup <= 600s (health-check budget (no life measured yet))"}}
    hs = {"agg_0": health(1000.0, 1031.5), "agg_1": health(1100.0, 1133.0),
          "prefill_0": health(900.0, 2000.0, watched=1500.0)}  # found running after a restart: not measured
    log.note(snap([agg0, agg1, pre0], hs, {"agg_0", "agg_1", "prefill_0"}))
    log.note(snap([agg0, agg1, pre0], hs, {"agg_0", "agg_1", "prefill_0"}))  # the same lives: noted once
    again = StartupLog(state)  # a restarted reconciler reads what the last one measured
    h = again.history("r")
    assert [(x.unit, x.ready_after) for x in h["agg"]] == [("agg_0", 31.5), ("agg_1", 33.0)]
    assert "prefill" not in h
    s = again.startups("r", ["agg", "prefill"], 600.0)
    assert (s["agg"].p90, s["agg"].lives) == (33.0, 2) and (s["prefill"].p90, s["prefill"].lives) == (600.0, 0)
    assert again.summary("r")["agg"]["text"] == "startup p90 33s, p50 31.5s (measured over 2 lives)"
    # the first request of a life, noted once
    again.routed("r", "agg", "agg_1", 1100.0, 1140.0)
    again.routed("r", "agg", "agg_1", 1100.0, 1200.0)
    assert [x.routed_after for x in again.history("r")["agg"]] == [None, 40.0]
    assert again.summary("r")["agg"]["routedP90"] == 40.0
    assert again.summary("r")["prefill"]["source"] == "budget"  # the roles the file was written with are kept


def test_the_history_is_bounded(tmp_path: Path):
    log = StartupLog(StateDir(tmp_path))
    agg0 = unit("agg", 0)
    for i in range(KEEP + 5):
        log.note(snap([agg0], {"agg_0": health(1000.0 + 100 * i, 1030.0 + 100 * i + i)}, {"agg_0"}))
    lives = json.loads((tmp_path / "r" / "startup.json").read_text())["roles"]["agg"]
    assert len(lives) == KEEP and lives[0]["readyAfter"] == 35.0 and lives[-1]["readyAfter"] == 30.0 + KEEP + 4


def test_a_wake_up_holds_at_least_the_measured_startup_and_says_how_long(tmp_path: Path):
    assert wake_eta.measured_startup(tmp_path, "r") is None
    log = StartupLog(StateDir(tmp_path))
    agg0 = unit("agg", 0)
    log.note(snap([agg0], {}, set()))
    assert wake_eta.measured_startup(tmp_path, "r") is None  # a budget is a bound, not a wait
    log.note(snap([agg0], {"agg_0": health(1000.0, 1400.0)}, {"agg_0"}))
    assert wake_eta.measured_startup(tmp_path, "r") == 400.0
    # the recipe's hold when it is longer; the measured startup when the hold is shorter; within the holder's bound
    assert [wake_eta.hold_at_least(300.0, s) for s in (None, 120.0, 400.0, 9000.0)] == [300.0, 300.0, 400.0, 3600.0]
    assert wake_eta.hold_at_least(None, 400.0) is None  # no holder
    # at zero, no wake-up timed yet: the 503 says the measured startup (Retry-After)
    o = NS(pending={}, allocs_of=lambda _n: [])
    wake_eta.tell_holder(tmp_path, "r", {"since": None, "took": None}, NS(units=()), o, 5000.0, at_zero=True,
                         startup=400.0)
    assert json.loads((tmp_path / "r" / "gateway" / "wake.json").read_text())["expectedReadyAt"] == 5400.0
    wake_eta.tell_holder(tmp_path, "r", {"since": 5000.0, "took": None}, NS(units=()), o, 5010.0, startup=400.0)
    assert json.loads((tmp_path / "r" / "gateway" / "wake.json").read_text())["expectedReadyAt"] == 5400.0


def test_the_metric_has_a_series_per_role_and_quantile_and_drops_gone_ones():
    m = Metrics()
    m.startups({"r": {"agg": {"p50": 30.0, "p90": 33.0, "source": "measured"},
                      "prefill": {"p50": 600.0, "p90": 600.0, "source": "budget"}}})
    got = lambda *labels: m.registry.get_sample_value(  # noqa: E731
        "reconciler_startup_seconds", dict(zip(("recipe", "role", "quantile", "source"), labels)))
    assert got("r", "agg", "0.9", "measured") == 33.0 and got("r", "agg", "0.5", "measured") == 30.0
    assert got("r", "prefill", "0.9", "budget") == 600.0
    m.startups({})
    assert got("r", "agg", "0.9", "measured") is None


def test_get_wide_and_describe_print_it():
    s = {"agg": {"p50": 30.0, "p90": 33.0, "lives": 2, "last": 31.0, "routedP90": 40.0, "text": "startup p90 33s"},
         "prefill": {"p50": 600.0, "p90": 600.0, "lives": 0, "last": None, "routedP90": None, "text": "startup <= 600s"}}
    assert startup_view.cell(s) == "agg:33s,prefill:<=600s" and startup_view.cell(None) == "-"
    out = CliRunner().invoke(click.command()(lambda: startup_view.print_describe(s))).output
    assert "agg: startup p90 33s; last 31s; to the first request p90 40s" in out and "prefill: startup <= 600s" in out
    assert startup_view.summary({"summary": s}) == s and startup_view.summary({}) is None
