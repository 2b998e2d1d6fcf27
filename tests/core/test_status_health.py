"""Status building (pure) and the health tracker's memory, on hand-built values."""

from __future__ import annotations

import pytest

from builders import desired, desired_recipe, life, observed, step, unit
from reconciler.core.plan import plan
from reconciler.shell.readiness.health import HealthTracker
from reconciler.shell.status import build_status
from reconciler.world import RestartPolicy

A0, A1 = unit(index=0), unit(index=1)


def status(d, o, now=100.0, invalid=None, prev=None, launches=None):
    rp = plan(desired(d), o, now).recipes[d.name]
    return build_status(d.name, d, o, rp, invalid, prev or {}, launches or {}, now)


def cond(st, kind):
    c = next(c for c in st["conditions"] if c["type"] == kind)
    return c["status"], c["reason"]


@pytest.mark.parametrize("what, d, o, launches, phase, rows, conds", [
    ("converged", desired_recipe(A0, A1), observed(step(index=0), step(index=1), ready=[("agg", 0), ("agg", 1)]), {},
     "Ready", ["Ready", "Ready"], {"Ready": ("True", "AllReady"), "Progressing": ("False", "Converged"),
                                   "Degraded": ("False", "AsExpected")}),
    ("one starting", desired_recipe(A0, A1), observed(step(index=0), step(index=1), ready=[("agg", 0)]), {},
     "Progressing", ["Ready", "Starting"], {"Ready": ("False", "NotReady"), "Progressing": ("True", "WaitingForReady")}),
    ("one backing off after a crash", desired_recipe(A0, A1),
     observed(step(index=0), ready=[("agg", 0)], health={("agg", 1): life(restarts=1, exit=(1, 99.0))}),
     {"agg_1": {"launches": 1}}, "Progressing", ["Ready", "BackOff"],
     {"Degraded": ("True", "WorkersDown"), "Progressing": ("True", "WaitingForReady")}),
    ("one given up on", desired_recipe(A0, A1, restart={"agg": RestartPolicy("never")}),
     observed(step(index=0), ready=[("agg", 0)], health={("agg", 1): life(exit=(3, 50.0))}),
     {"agg_1": {"launches": 1}}, "Degraded", ["Ready", "Failed"],
     {"Degraded": ("True", "WorkersFailed"), "Progressing": ("False", "WorkersFailed")}),
    ("an allocation pending", desired_recipe(A0, waiting=[("agg", 1)], pending_reason="allocation 1: Resources"),
     observed(step(index=0), ready=[("agg", 0)]), {}, "Progressing", ["Ready", "Waiting"],
     {"Progressing": ("True", "AllocationPending")}),
    ("being rolled", desired_recipe(A0), observed(step(index=0, spec="old"), ready=[("agg", 0)]), {},
     "Progressing", ["Outdated"], {"Progressing": ("True", "Reconciling")}),
    # a worker no allocation can hold yet (the file packs more on a node than its job holds): not Ready
    ("one unplaceable", desired_recipe(A0, unplaceable={"agg_1": "uses GPU 1, job 7 holds 1 per node"}),
     observed(step(index=0), ready=[("agg", 0)]), {}, "Progressing", ["Ready", "Waiting"],
     {"Ready": ("False", "NotReady")}),
])
def test_status_table(what, d, o, launches, phase, rows, conds):
    st = status(d, o, launches=launches)
    assert st["phase"] == phase
    assert [r["phase"] for r in st["workers"]] == rows
    for kind, want in conds.items():
        assert cond(st, kind) == want, kind


def test_status_reports_the_last_good_spec_and_keeps_transition_times():
    d = desired_recipe(A0)
    o = observed(step(index=0), ready=[("agg", 0)])
    first = status(d, o, now=100.0)
    later = status(d, o, now=500.0, prev=first)
    assert [c["lastTransitionTime"] for c in later["conditions"]] == [c["lastTransitionTime"] for c in first["conditions"]]
    bad = status(d, o, now=600.0, prev=later, invalid="r.yaml: roles.agg.workers: expected an integer")
    assert cond(bad, "Invalid") == ("True", "InvalidSpec") and "last applied" in next(
        c["message"] for c in bad["conditions"] if c["type"] == "Invalid")
    assert bad["phase"] == "Ready"  # still serving the last good spec
    assert bad["roles"]["agg"] == {"desired": 1, "ready": 1, "running": 1, "unavailable": 0}


def test_health_tracker_probe_history():
    t = HealthTracker(None)
    k = ("r", "agg", 0)
    t.probed(k, False, 1.0)
    life_ = t.life(k)
    assert (life_.watched_since, life_.was_ready, life_.probe_failures) == (1.0, False, 0)  # not failures before Ready
    t.probed(k, True, 2.0)
    t.probed(k, True, 3.0)
    assert (life_.was_ready, life_.ready_since) == (True, 2.0)
    t.probed(k, False, 4.0)
    t.probed(k, False, 5.0)
    assert (life_.probe_failures, life_.ready_since, life_.failing_since) == (2, None, 4.0)  # from the first
    t.probed(k, True, 6.0)
    assert (life_.probe_failures, life_.ready_since, life_.first_ready) == (0, 6.0, 2.0)  # a flap keeps the first
    assert life_.failing_since is None
    t.probed(k, False, 7.0)
    assert (life_.probe_failures, life_.failing_since) == (1, 7.0)  # a new run of failures, a new clock
    t.new_life(k)
    assert (t.life(k).was_ready, t.life(k).first_ready) == (False, None)


def test_health_tracker_finds_a_fatal_line_across_reads_and_rotation(tmp_path):
    from reconciler.drivers.base import step_log_paths

    u = unit(index=0).__class__(**{**unit(index=0).__dict__, "fatal_patterns": (r"CUDA error",)})
    log = step_log_paths(tmp_path, "r", "agg_0", 0).log
    log.parent.mkdir(parents=True)
    log.write_bytes(b"starting\nCUDA er")  # a line cut mid-write
    t = HealthTracker(tmp_path)
    t.scan_logs(u)
    assert t.life(u.key).fatal is None
    with open(log, "ab") as f:
        f.write(b"ror: device lost\n")
    t.scan_logs(u)
    assert t.life(u.key).fatal == "CUDA error: device lost"
    t.new_life(u.key)
    log.replace(log.with_name(log.name + ".1"))  # rotated at relaunch: the new file is read from its start
    log.write_bytes(b"fine\n")
    t.scan_logs(u)
    assert t.life(u.key).fatal is None


def test_a_log_readiness_probe_matches_a_line_of_this_life(tmp_path):
    from dataclasses import replace

    from reconciler.drivers.base import step_log_paths

    u = replace(unit("svc-side", 0), probe="log", probe_arg=r"Master service started on port \d+", phase="infra")
    log = step_log_paths(tmp_path, "r", "svc-side_0", 0).log
    log.parent.mkdir(parents=True)
    log.write_bytes(b"booting\nMaster service started on po")
    t = HealthTracker(tmp_path)
    t.scan_logs(u)
    assert not t.life(u.key).log_ready  # half a line is not a match
    with open(log, "ab") as f:
        f.write(b"rt 50051\n")
    t.scan_logs(u)
    assert t.life(u.key).log_ready
    t.new_life(u.key)
    log.replace(log.with_name(log.name + ".1"))
    log.write_bytes(b"booting again\n")
    t.scan_logs(u)
    assert not t.life(u.key).log_ready  # a relaunch must say it again


def test_router_sync_adds_ready_workers_and_removes_the_rest():
    from dataclasses import replace

    from builders import desired_recipe, frontend, observed, step
    from reconciler.shell.readiness.router_sync import diff, wanted

    fe = replace(frontend(), worker_api="sglang-router")
    a0, a1, a2 = unit(index=0), unit(index=1), unit(index=2)
    d = desired_recipe(a0, a1, a2, fe=fe)
    o = observed(step(index=0), step(index=1), step(index=2), ready=[("agg", 0), ("agg", 2), ("frontend", 0)])
    want = wanted(d, o)
    assert sorted(want) == [a0.url, a2.url] and want[a0.url] == {"url": a0.url}  # agg: no worker_type
    add, remove = diff(want, {a1.url: "id-1", a2.url: "id-2", "http://gone:1": "id-9"})
    assert add == [{"url": a0.url}] and remove == [("id-9", "http://gone:1"), ("id-1", a1.url)]
    # the served name goes with each worker: an engine without SGLang's /get_model_info (vLLM) is
    # otherwise listed by the router as model "unknown"
    named = wanted(replace(d, served_model="Qwen/Qwen3-0.6B"), o)
    assert named[a0.url] == {"url": a0.url, "model_id": "Qwen/Qwen3-0.6B"}


@pytest.mark.parametrize("gateway, ready, reason", [
    (None, "True", "AllReady"),  # no gateway (nginx not installed): the frontend's own address
    ({"up": True, "upstreams": ["n0:21000"], "url": "http://h:1", "reason": None}, "True", "AllReady"),
    # running, but run has not reloaded it with the frontend yet: a request would get 503
    ({"up": True, "upstreams": [], "url": "http://h:1", "reason": None}, "False", "GatewayNotRouting"),
    ({"up": False, "upstreams": ["n0:21000"], "url": "http://h:1", "reason": "not running"}, "False", "GatewayDown"),
])
def test_ready_needs_a_gateway_that_routes_to_a_frontend(gateway, ready, reason):
    fe = unit(role="frontend", index=0)
    d = desired_recipe(A0, fe=fe)
    o = observed(step(index=0), step(role="frontend", index=0), ready=[("agg", 0), ("frontend", 0)])
    rp = plan(desired(d), o, 100.0).recipes[d.name]
    st = build_status(d.name, d, o, rp, None, {}, {}, 100.0, gateway=gateway)
    assert cond(st, "Ready") == (ready, reason)
