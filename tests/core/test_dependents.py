"""Dependency-aware restarts (pure): the graph from what units read, and who is relaunched when."""

from __future__ import annotations

from dataclasses import replace

import pytest

from reconciler.core.plan import plan
from reconciler.core.plan.dependents import dependents
from reconciler.core.plan.results import PlaceReason, StopReason
from reconciler.world import Launch
from tests.core.builders import R, desired, desired_recipe, frontend, life, observed, service, step, unit


def reads(u, **env):
    """``u`` with these variables in its environment."""
    launches = tuple(replace(l, env=tuple(sorted(env.items()))) for l in u.launches)
    return replace(u, launches=launches)


ETCD = replace(service("etcd", "infra"), nodes=("head",), ports={"client": 2379, "peer": 2380})
NATS = replace(service("nats", "infra"), nodes=("head",), ports={"client": 4222})
W0 = reads(unit(index=0), ETCD_ENDPOINTS="http://head:2379", NATS_SERVER="nats://head:4222")
W1 = reads(unit(index=1), OTHER="head:23790")  # a longer port that starts with etcd's: not etcd
FE = reads(frontend(), ETCD_ENDPOINTS="http://head:2379")


def test_the_graph_is_derived_from_what_units_read():
    d = desired_recipe(W0, W1, fe=FE, services=(ETCD, NATS))
    assert dependents(d) == {("svc-etcd", 0): (("agg", 0), ("frontend", 0)), ("svc-nats", 0): (("agg", 0),)}
    # argv and Unit.needs count too (a failover engine's gms)
    gms = replace(service("gms", "with_workers"), nodes=("n0-0",), ports={"http": 7000})
    argv = replace(unit(index=2), launches=(Launch(0, ("n2-0",), 1, None, ("w", "--gms", "n0-0:7000"), ()),))
    needs = replace(unit(index=3), needs=(("svc-gms", 0),))
    assert dependents(desired_recipe(argv, needs, services=(gms,))) == {("svc-gms", 0): (("agg", 2), ("agg", 3))}


def _world(etcd_launch: float, etcd_ready: bool = True, w0_launch: float = 10.0):
    d = desired_recipe(W0, W1, fe=FE, services=(ETCD, NATS))
    ready = [("agg", 0), ("agg", 1), ("frontend", 0), ("svc-nats", 0)] + ([("svc-etcd", 0)] if etcd_ready else [])
    o = observed(step("svc-etcd", 0, spec="svc", num=90), step("svc-nats", 0, spec="svc", num=91),
                 step("agg", 0), step("agg", 1), step("frontend", 0, spec="fe", num=92), ready=ready,
                 health={("svc-etcd", 0): life(launches=2, launched=etcd_launch, was_ready=etcd_ready),
                         ("svc-nats", 0): life(launched=1.0, was_ready=True),
                         ("agg", 0): life(launched=w0_launch, was_ready=True),
                         ("agg", 1): life(launched=10.0, was_ready=True),
                         ("frontend", 0): life(launched=12.0, was_ready=True)})
    return d, o


@pytest.mark.parametrize("what, etcd_launch, etcd_ready, stopped", [
    ("etcd's new life is Ready: who read it is relaunched, in the same tick", 50.0, True, ["agg_0", "frontend_0"]),
    ("etcd's new life is not Ready yet: wait for it", 50.0, False, []),
    ("etcd's life is older than its dependents: nothing", 5.0, True, []),
])
def test_who_is_relaunched_and_when(what, etcd_launch, etcd_ready, stopped):
    d, o = _world(etcd_launch, etcd_ready)
    rp = plan(desired(d), o, now=60.0).recipes[R]
    deps = [s for s in rp.stop if s.reason is StopReason.DEPENDENCY_RESTARTED]
    assert sorted(s.unit for s in deps) == stopped, what
    assert all(s.detail == "svc-etcd_0 has a new life" for s in deps)


def test_a_dependent_stopped_for_its_service_comes_back_at_once_and_is_no_restart():
    d, o = _world(50.0)
    o = replace(o, steps=tuple(s for s in o.steps if (s.role, s.index) != ("agg", 0)),
                health={**o.health, (R, "agg", 0): life(launched=10.0, restarts=3, exit=(143, 59.0),
                                                         stopped_for=StopReason.DEPENDENCY_RESTARTED.value)})
    rp = plan(desired(d), o, now=59.5).recipes[R]
    assert [(a.unit.name, a.reason) for a in rp.place] == [("agg_0", PlaceReason.REPLACEMENT)]
    assert StopReason.DEPENDENCY_RESTARTED.on_purpose


def test_a_frontend_relaunched_for_its_service_does_not_wait_for_a_worker():
    d, o = _world(50.0)
    gone = {("agg", 0), ("agg", 1), ("frontend", 0)}
    stopped = StopReason.DEPENDENCY_RESTARTED.value
    o = replace(o, steps=tuple(s for s in o.steps if (s.role, s.index) not in gone),
                ready={k: v for k, v in o.ready.items() if k[1:] not in gone},
                health={**o.health, **{(R, *k): life(launched=10.0, exit=(143, 59.0), stopped_for=stopped)
                                       for k in gone}})
    rp = plan(desired(d), o, now=59.5).recipes[R]
    assert sorted(a.unit.name for a in rp.place) == ["agg_0", "agg_1", "frontend_0"]
    # a frontend that failed on its own still waits for a Ready worker (srtctl's start order)
    o = replace(o, health={**o.health, (R, "frontend", 0): life(launched=10.0, exit=(1, 59.0))})
    rp = plan(desired(d), o, now=59.5).recipes[R]
    assert sorted(a.unit.name for a in rp.place) == ["agg_0", "agg_1"]


def test_status_a_unit_leaving_for_its_service_is_not_ready():
    from reconciler.shell.status import build_status

    d, o = _world(50.0)
    rp = plan(desired(d), o, now=60.0).recipes[R]
    st = build_status(R, d, o, rp, None, {}, {}, 60.0)
    rows = {r["name"]: r["ready"] for r in st["workers"]}
    assert rows["agg_0"] is False and rows["frontend_0"] is False and rows["agg_1"] is True
    assert st["phase"] != "Ready"


@pytest.mark.parametrize("text, found", [
    ("ETCD_ENDPOINTS=http://node1:2379", True),
    ("A=gpu-node1:2379 B=node1:2379", True),  # a longer host name first: the search goes on
    ("x_node1:2379", False),  # the tail of another host name
    ("node1:23790", False),  # the head of a longer port
    ("node1:2379,node2:2379", True),
])
def test_an_address_is_named_only_whole(text, found):
    from reconciler.core.plan.dependents import _names

    assert _names(text, "node1:2379") is found
