"""plan(): one table test per policy, plus convergence as a property."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fakes import FakeCluster, recipe
from reconciler.core.plan import (
    CancelAlloc, CancelStep, LaunchStep, PlaceReason, StopReason, SubmitAlloc, WaitReason,
)
from reconciler.desired.elastic import GROWN_BASE


def launched_on(c):
    return sorted((s.role, s.index) for s in c.steps.values())


def kinds(p):
    return [type(a).__name__ for a in p.actions]


def launched(p):
    return sorted((a.unit.role, a.unit.index) for a in p.actions if isinstance(a, LaunchStep))


def test_fresh_deploy_submits_one_allocation_then_launches_every_worker():
    c = FakeCluster()
    p = c.plan(agg(2))
    assert kinds(p) == ["SubmitAlloc"]
    spec = p.actions[0].spec
    assert (spec.count, spec.gpus_per_node) == (1, 2)
    c.apply(p)
    p = c.plan(agg(2))
    assert launched(p) == [("agg", 0), ("agg", 1)]
    c.apply(p)
    assert not c.plan(agg(2)).actions


def test_scale_up_launches_exactly_the_lowest_free_indices():
    c = FakeCluster()
    c.converge(agg(4))
    c.converge(agg(2))  # the job still holds the 4 GPUs it was submitted for
    before = dict(c.steps)
    p = c.plan(agg(4))
    assert kinds(p) == ["LaunchStep", "LaunchStep"]
    assert launched(p) == [("agg", 2), ("agg", 3)]
    c.apply(p)
    assert all(sid in c.steps for sid in before)  # nothing else moved


def test_more_workers_packed_than_the_job_holds_get_a_successor_sized_for_them():
    """The file packs 4 one-GPU workers on a node whose job holds 2: the new ones are never
    launched there (the GPUs are not the job's); a successor for 4 is submitted, every worker moves
    onto it (with surge: a hand-over), and the old job is released once its steps are gone. (A job
    labelled with the counts it was packed for keeps its workers and the new ones get jobs of their
    own: tests/test_edit_adds_workers.py; this one was submitted before jobs were so labelled.)"""
    c = FakeCluster(packed_labels=False)
    c.converge(agg(2))
    (old,) = c.allocs
    p = c.plan(agg(4))
    assert kinds(p) == ["SubmitAlloc"]
    assert p.actions[0].spec.gpus_per_node == 4
    assert "sized for its workers: agg_2 uses GPU 2, job 100 holds 2 per node" in p.actions[0].describe()
    assert p.recipes["r"].waiting["agg_2"].reason == WaitReason.RESIZING
    c_ = p.recipes["r"].counts["agg"]  # the two that wait are wanted: desired, and unavailable
    assert (c_.desired, c_.running, c_.unavailable) == (4, 2, 4 - c_.ready)
    c.converge(agg(4))  # refuses any launch on GPUs a job does not hold
    assert old not in c.allocs and [a.gpus for a in c.allocs.values()] == [4]
    assert launched_on(c) == [("agg", i) for i in range(4)]


def test_scale_down_cancels_highest_indices_and_releases_empty_allocation():
    c = FakeCluster()
    rs = agg(4, gpus=8, extra="reconcile: {nodes_per_allocation: 1}")
    c.converge(rs)
    assert len(c.allocs) == 4
    p = c.plan(agg(2, gpus=8, extra="reconcile: {nodes_per_allocation: 1}"))
    cancels = [a for a in p.actions if isinstance(a, CancelStep)]
    assert sorted(a.unit for a in cancels) == ["agg_2", "agg_3"]
    dropped = [a for a in p.actions if isinstance(a, CancelAlloc)]
    assert sorted(a.index for a in dropped) == [2, 3]
    assert kinds(p).index("CancelAlloc") > kinds(p).index("CancelStep")  # steps first
    assert not any(isinstance(a, LaunchStep | SubmitAlloc) for a in p.actions)


def test_scale_down_within_a_shared_allocation_keeps_it():
    c = FakeCluster()
    c.converge(agg(4))
    p = c.plan(agg(1))
    assert kinds(p) == ["CancelStep"] * 3


def test_pending_allocation_launches_nothing_and_reports_slurms_reason():
    c = FakeCluster(pending=True)
    c.apply(c.plan(agg(2)))
    d = c.desired(agg(2))["r"] if False else c.desired(agg(2)).recipes["r"]
    p = c.plan(agg(2))
    assert not p.actions  # no second submission, no launches
    assert d.waiting == (("agg", 0), ("agg", 1))
    assert "Resources" in d.pending_reason


def test_ended_worker_is_relaunched_in_place_with_same_nodes_and_ports():
    c = FakeCluster()
    c.converge(agg(2))
    victim = next(s for s in c.steps.values() if s.index == 1)
    first = next(u for u in c.desired(agg(2)).recipes["r"].units if u.index == 1)
    del c.steps[victim.step_id]
    p = c.plan(agg(2))
    assert launched(p) == [("agg", 1)]
    again = p.actions[0].unit
    assert again.nodes == first.nodes and again.ports == first.ports and again.gpus == first.gpus
    assert p.actions[0].job_id == victim.job_id


def test_ended_allocation_is_resubmitted_and_workers_return_when_it_runs():
    c = FakeCluster()
    c.converge(agg(2))
    (job,) = list(c.allocs)
    del c.allocs[job]
    for sid in list(c.steps):
        del c.steps[sid]
    c.pending = True
    p = c.plan(agg(2))
    assert kinds(p) == ["SubmitAlloc"] and p.actions[0].spec.index == 0
    c.apply(p)
    assert not c.plan(agg(2)).actions
    c.run_alloc()
    assert launched(c.plan(agg(2))) == [("agg", 0), ("agg", 1)]


def test_deleted_recipe_cancels_steps_then_allocations():
    c = FakeCluster()
    c.converge({**agg(2), **agg(1, name="other")})
    p = c.plan(agg(1, name="other"))
    assert all(a.recipe == "r" for a in p.actions)
    assert kinds(p) == ["CancelStep", "CancelStep", "CancelAlloc"]


def test_every_manifest_gone_is_refused_without_allow_empty():
    c = FakeCluster()
    c.converge(agg(2))
    p = c.plan({}, manifests_seen=0)
    assert not p.actions and p.refused_prune
    assert p.recipes["r"].state.name == "PRUNE_REFUSED" and "--allow-empty" in p.waiting_lines()[0]
    p = c.plan({}, allow_empty=True, manifests_seen=0)
    assert kinds(p) == ["CancelStep", "CancelStep", "CancelAlloc"]
    # a directory that still has (invalid) files is not "every manifest gone"
    assert c.plan({}, manifests_seen=1).actions


def test_foreign_jobs_are_never_seen_by_plan():
    from reconciler.drivers.slurm import SEP, parse_jobs, parse_steps

    comment = "reconciler/v1 owner={} recipe=r alloc=0 start=0 nodes=2"
    lines = [
        ["7", "train-llama", "RUNNING", "None", "gpu[01-02]", "2", "(null)"],  # someone else's job
        ["8", "rcl:me:r:a0", "RUNNING", "None", "gpu01", "1", "hand-written comment"],  # name alone is not enough
        ["10", "rcl:other:r:a0", "RUNNING", "None", "gpu05", "2", comment.format("other")],  # another reconciler's
        ["9", "rcl:me:r:a0", "RUNNING", "None", "gpu[03-04]", "2", comment.format("me")],
    ]
    allocs = parse_jobs("\n".join(SEP.join(f) + SEP for f in lines), "me")
    assert [a.job_id for a in allocs] == ["9"]
    assert allocs[0].nodes == ("gpu03", "gpu04")
    steps = parse_steps("\n".join(SEP.join(f) for f in [
        ["7.0", "python", "gpu01"], ["10.1", "rcl:other:r:agg:1:0:abc123", "gpu05"],
        ["9.3", "rcl:me:r:agg:1:0:abc123", "gpu03"]]), "me")
    assert [(s.step_id, s.role, s.index) for s in steps] == [("9.3", "agg", 1)]


def test_spec_change_without_surge_rolls_one_worker_at_a_time_gated_on_ready():
    c = FakeCluster()
    no_surge = "reconcile: {rollout: {max_surge: 0, max_unavailable: 1}}"
    c.converge(agg(3, extra=no_surge))
    new = {"r": recipe((AGG % {"workers": 3, "gpus": 1, "frontend": "none", "extra": no_surge}).replace(
        "engine: mocker", "engine: {type: mocker, speedup_ratio: 7}"), "r")}
    p = c.plan(new)
    assert kinds(p) == ["CancelStep"] and p.actions[0].unit == "agg_0"
    c.apply(p)
    p = c.plan(new)
    assert launched(p) == [("agg", 0)]  # the replacement, and nothing else moves yet
    c.apply(p)
    new_step = next(s for s in c.steps.values() if s.index == 0)
    c.unready.add(new_step.unit_key)
    p = c.plan(new)
    assert not p.actions and p.recipes["r"].waiting["agg_1"].reason is WaitReason.ROLLOUT_BUDGET
    c.unready.clear()
    p = c.plan(new)
    assert kinds(p) == ["CancelStep"] and p.actions[0].unit == "agg_1"
    assert c.converge(new) > 0


def test_frontend_starts_only_after_a_worker_is_ready():
    c = FakeCluster()
    rs = agg(1, frontend="builtin")
    c.apply(c.plan(rs))
    p = c.plan(rs)
    assert launched(p) == [("agg", 0)]
    assert p.recipes["r"].waiting["frontend_0"].reason is WaitReason.NEEDS_READY_WORKER
    c.apply(p)
    assert launched(c.plan(rs)) == [("frontend", 0)]


MULTI = """\
name: mn
model: {path: /m}
resources: {gpus_per_node: 4}
engine: sglang
frontend: {type: none}
roles: {agg: {nodes: 2, workers: 1, gpus: 8}}
"""


def test_multi_node_worker_missing_a_rank_is_relaunched_whole():
    c = FakeCluster()
    rs = {"mn": recipe(MULTI, "mn")}
    c.converge(rs)
    assert len(c.steps) == 2
    rank1 = next(s for s in c.steps.values() if s.rank == 1)
    del c.steps[rank1.step_id]
    p = c.plan(rs)
    assert kinds(p) == ["CancelStep"] and p.actions[0].reason is StopReason.RANK_LOST
    c.apply(p)
    p = c.plan(rs)
    assert sorted(a.launch.rank for a in p.actions) == [0, 1]


def test_suspend_takes_no_action_and_keeps_what_runs_and_resume_converges_again():
    c = FakeCluster()
    c.converge(agg(2))
    running = set(c.steps)
    suspended = agg(2, extra="reconcile: {suspend: true}")
    assert not c.plan(suspended).actions  # nothing torn down
    del c.steps[next(iter(sorted(c.steps)))]  # a worker dies while suspended: not relaunched
    assert not c.plan(suspended).actions
    assert not c.plan(agg(3, extra="reconcile: {suspend: true}")).actions  # nor scaled
    assert c.converge(agg(2)) >= 1 and len(c.steps) == len(running)


def test_recipe_needing_two_allocations():
    c = FakeCluster()
    rs = agg(2, gpus=8, extra="reconcile: {nodes_per_allocation: 1}")
    p = c.plan(rs)
    assert sorted((a.spec.index, a.spec.start, a.spec.count) for a in p.actions) == [(0, 0, 1), (1, 1, 1)]
    c.apply(p)
    p = c.plan(rs)
    assert {a.job_id for a in p.actions} == set(c.allocs)


def test_scale_up_beyond_the_allocation_submits_another():
    c = FakeCluster()
    c.converge(agg(1, gpus=8))
    p = c.plan(agg(2, gpus=8))
    # the added worker is an allocation of its own, on ordinals past the file's (desired/elastic.py)
    assert kinds(p) == ["SubmitAlloc"] and (p.actions[0].spec.index, p.actions[0].spec.count) == (1, 1)
    assert p.actions[0].spec.start >= GROWN_BASE and p.actions[0].spec.gpus_per_node == 8


# ---------------------------------------------------------------- convergence property
spec_st = st.fixed_dictionaries({
    "disagg": st.booleans(),
    "workers": st.integers(0, 4),
    "gpus": st.sampled_from([1, 2, 4, 8]),
    "frontend": st.sampled_from(["builtin", "none"]),
    "chunk": st.sampled_from([None, 1, 2]),
    "ratio": st.sampled_from([1, 5]),
})


def make(name: str, s: dict):
    extra = f"reconcile: {{nodes_per_allocation: {s['chunk']}}}" if s["chunk"] else ""
    engine = f"engine: {{type: mocker, speedup_ratio: {s['ratio']}}}"
    if s["disagg"]:
        roles = (f"roles:\n  prefill: {{workers: {max(1, s['workers'])}, gpus: {s['gpus']}}}\n"
                 f"  decode: {{workers: {s['workers']}, gpus: {s['gpus']}}}\n")
    else:
        roles = f"roles:\n  agg: {{workers: {s['workers']}, gpus: {s['gpus']}}}\n"
    text = (f"name: {name}\nmodel: {{path: /m}}\nresources: {{gpus_per_node: 8}}\n{engine}\n"
            f"frontend: {{type: {s['frontend']}}}\n{roles}{extra}\n")
    return recipe(text, name)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.dictionaries(st.sampled_from(["a", "b", "c"]), spec_st, min_size=1, max_size=3),
    st.dictionaries(st.sampled_from(["a", "b", "c"]), spec_st, max_size=3),
    st.lists(st.integers(0, 50), max_size=4),
)
def test_plan_converges_and_is_idempotent(first, second, kills):
    """Executing plans against the fake reaches a fixpoint; at the fixpoint the plan is empty."""
    c = FakeCluster()
    r1 = {n: make(n, s) for n, s in first.items()}
    c.converge(r1)
    assert not c.plan(r1).actions
    # perturb the world: kill some steps, then change the manifests
    ids = sorted(c.steps)
    for k in kills:
        if ids:
            c.steps.pop(ids[k % len(ids)], None)
    r2 = {n: make(n, s) for n, s in second.items()}
    c.converge(r2, allow_empty=True)
    assert not c.plan(r2, allow_empty=True).actions
    # the converged world matches the manifests exactly
    want = {(n, role, i) for n, r in r2.items() for role, lay in r.role_layouts().items() for i in range(lay.workers)}
    have = {s.unit_key for s in c.steps.values() if s.role != "frontend"}
    assert have == want
    assert {a.recipe for a in c.allocs.values()} <= set(r2)


# ---------------------------------------------------------------- self-healing policies
import pytest  # noqa: E402

from reconciler.core.plan.relaunch import Gate, restart_gate  # noqa: E402
from reconciler.world import RestartPolicy, UnitHealth  # noqa: E402
from support.recipes import AGG, agg


def life(launches=1, restarts=0, launched=0.0, exit=None, missing=None, **kw) -> UnitHealth:
    return UnitHealth(launches=launches, restarts=restarts, last_launch=launched, last_exit=exit,
                      missing_since=missing, **kw)


N, R, P = PlaceReason.NEW, PlaceReason.RELAUNCH, PlaceReason.REPLACEMENT
B, G = WaitReason.BACKOFF, WaitReason.GAVE_UP


@pytest.mark.parametrize(
    "policy, health, now, gate, reason, fragment",
    [
        (RestartPolicy(), None, 0, "launch", N, ""),
        (RestartPolicy(), life(launches=0), 0, "launch", N, ""),
        (RestartPolicy("never"), life(exit=(1, 5.0)), 100, "stop", G, "restart policy is never"),
        (RestartPolicy("on-failure"), life(exit=(0, 5.0)), 100, "stop", G, "does not restart a clean exit"),
        (RestartPolicy("on-failure"), life(exit=(1, 5.0)), 16, "launch", R, "exited with code 1; restart 1"),
        # the first relaunch after a failure is immediate (kubelet-style), from the exit record's time
        (RestartPolicy("on-failure"), life(exit=(1, 5.0)), 5, "launch", R, "exited with code 1; restart 1"),
        # then the backoff: 10 s after the second failure, doubling (restarts = relaunches in a row)
        (RestartPolicy("on-failure"), life(restarts=1, exit=(1, 5.0)), 14, "wait", B, "relaunch in 1s"),
        (RestartPolicy("always"), life(restarts=1, exit=(0, 5.0)), 10, "wait", B, "(restart 2)"),
        (RestartPolicy("always"), life(restarts=3, exit=(137, 0.0)), 39, "wait", B, "relaunch in 1s"),
        (RestartPolicy("always"), life(restarts=3, exit=(137, 0.0)), 41, "launch", R, "restart 4"),
        (RestartPolicy("always"), life(restarts=12, exit=(1, 0.0)), 299, "wait", B, "relaunch in 1s"),  # capped at 300
        (RestartPolicy(max_restarts=2), life(restarts=2, exit=(1, 0.0)), 1e6, "stop", G, "gave up after 2 restarts"),
        # stopped on purpose (a rollout): back at once, whatever the policy, and not a restart
        (RestartPolicy("never"), life(stopped_for=StopReason.SPEC_CHANGED.value), 0, "launch", P, ""),
        # stopped by liveness: a failure like any other
        (RestartPolicy("never"), life(stopped_for=StopReason.LIVENESS.value, exit=(143, 1.0)), 5, "stop", G, "never"),
        (RestartPolicy(), life(stopped_for="a reason from another version", exit=(1, 0.0)), 50, "launch", R, ""),
        # no exit record (SIGKILL): the end is when the step was first seen missing
        (RestartPolicy(), life(restarts=1, launched=50.0, missing=100.0), 105, "wait", B, "was killed; relaunch in 5s"),
        # an exit record older than the current life belongs to a previous life
        (RestartPolicy(), life(launched=50.0, exit=(0, 10.0), missing=100.0), 111, "launch", R, "was killed"),
    ],
)
def test_restart_gate_table(policy, health, now, gate, reason, fragment):
    got, why, detail, due = restart_gate(policy, health, now)
    assert (got, why, fragment in detail) == (Gate(gate), reason, True), detail
    assert (due is not None) == (got is Gate.WAIT)


RESTART = "reconcile: {liveness_failures: 2}\nhealth_check: {max_attempts: 3, interval_seconds: 10}\n"


def test_dead_worker_again_waits_for_backoff_then_is_relaunched():
    c = FakeCluster()
    rs = agg(2, extra=RESTART)
    c.converge(rs)
    dead = next(s for s in c.steps.values() if s.index == 1)
    del c.steps[dead.step_id]
    # its first relaunch was immediate; it died again: the second waits the backoff from its exit
    c.health[("r", "agg", 1)] = life(launched=0.0, exit=(3, 100.0), restarts=1)
    p = c.plan(rs, now=105.0)
    w = p.recipes["r"].waiting["agg_1"]
    assert not p.actions and w.reason is WaitReason.BACKOFF and "exited with code 3; relaunch in 5s" in w.detail
    assert p.recipes["r"].relaunch_later == {"agg_1": 110.0} and p.requeue_after == 5.0
    p = c.plan(rs, now=110.5)
    assert launched(p) == [("agg", 1)]


def test_liveness_stops_a_worker_that_stopped_answering():
    c = FakeCluster()
    rs = agg(2, extra=RESTART)
    c.converge(rs)
    c.health[("r", "agg", 0)] = life(was_ready=True, probe_failures=1)
    assert not c.plan(rs, now=5.0).actions
    c.health[("r", "agg", 0)] = life(was_ready=True, probe_failures=2)
    p = c.plan(rs, now=5.0)
    assert kinds(p) == ["CancelStep"] and p.actions[0].reason is StopReason.LIVENESS
    assert p.actions[0].detail == "2 health probes failed in a row"
    assert not p.actions[0].replace  # a failure: its relaunch goes through the restart policy


def test_fatal_log_line_stops_the_worker():
    c = FakeCluster()
    rs = agg(1, extra=RESTART)
    c.converge(rs)
    c.health[("r", "agg", 0)] = life(was_ready=True, fatal="FATAL mocker: simulated engine hang")
    p = c.plan(rs, now=1.0)
    assert kinds(p) == ["CancelStep"] and p.actions[0].reason is StopReason.FATAL_LOG
    assert p.actions[0].detail.startswith("FATAL mocker")


def test_worker_not_ready_within_startup_grace_is_stopped():
    c = FakeCluster()
    rs = agg(1, extra=RESTART)  # grace = 3 x 10 s
    c.converge(rs)
    c.health[("r", "agg", 0)] = life(launched=0.0, was_ready=False)
    assert not c.plan(rs, now=29.0).actions
    p = c.plan(rs, now=31.0)
    assert kinds(p) == ["CancelStep"] and p.actions[0].reason is StopReason.STARTUP_TIMEOUT


def test_rollout_replacements_skip_the_restart_policy():
    c = FakeCluster()
    no_surge = "reconcile: {liveness_failures: 2, rollout: {max_surge: 0, max_unavailable: 1}}\n"
    base = RESTART.replace("reconcile: {liveness_failures: 2}\n", no_surge)
    c.converge(agg(1, extra=base))
    changed = agg(1, extra=base + "environment: {X: '1'}\n")
    p = c.plan(changed)
    assert kinds(p) == ["CancelStep"] and p.actions[0].replace


def test_startup_grace_restarts_when_a_reconciler_adopts_a_worker():
    c = FakeCluster()
    rs = agg(1, extra=RESTART)  # grace 30 s
    c.converge(rs)
    # launched long ago by a previous reconciler process; this one started watching at t=1000
    c.health[("r", "agg", 0)] = life(launched=0.0, was_ready=False, watched_since=1000.0)
    assert not c.plan(rs, now=1010.0).actions  # one failed probe after a restart is not a verdict
    assert kinds(c.plan(rs, now=1031.0)) == ["CancelStep"]


def test_a_recipe_whose_desired_state_fails_is_held_not_pruned():
    from reconciler.core.ports import NodePortAllocator

    c = FakeCluster()
    rs = agg(3)
    c.converge(rs)
    c.ports = NodePortAllocator(20000, 20002)  # a fresh registry with room for two workers only
    d = c.desired(rs)
    assert "r" in d.held and "PortsExhausted" in d.held["r"]
    p = c.plan(rs)
    assert not p.actions  # nothing of it is cancelled
    assert p.recipes["r"].state.name == "HELD" and "PortsExhausted" in p.recipes["r"].detail


def test_a_step_we_just_cancelled_is_not_cancelled_again_and_blocks_its_relaunch():
    import dataclasses

    c = FakeCluster()
    no_surge = "reconcile: {rollout: {max_surge: 0, max_unavailable: 1}}\n"
    c.converge(agg(1, extra=no_surge))
    changed = agg(1, extra=no_surge + "environment: {X: '1'}\n")
    p = c.plan(changed)
    assert kinds(p) == ["CancelStep"]
    (sid,) = list(c.steps)
    c.steps[sid] = dataclasses.replace(c.steps[sid], terminating=True)  # still shutting down
    p = c.plan(changed)
    assert not p.actions  # neither a second cancel nor a launch onto its ports
    del c.steps[sid]
    assert launched(c.plan(changed)) == [("agg", 0)]
