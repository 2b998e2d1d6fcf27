"""Shadow-engine recovery in the plan: per-worker gms instances gate their own worker's engines
(``Unit.needs``), and each engine is its own unit, relaunched alone. Hand-built state, no YAML."""

from __future__ import annotations

from dataclasses import replace

import pytest

from builders import desired_recipe, life, observed, service, step, unit
from builders import expect, run, sets

ETCD = service("etcd", "infra")
GMS0 = replace(service("gms-agg", "before_workers"), index=0, probe="log")
GMS1 = replace(service("gms-agg", "before_workers"), index=1, probe="log")
E0, E1 = unit("agg", 0), unit("agg", 1)
S0 = replace(unit("agg-e1", 0), needs=(("svc-gms-agg", 0),))
S1 = replace(unit("agg-e1", 1), needs=(("svc-gms-agg", 1),))
E0, E1 = replace(E0, needs=(("svc-gms-agg", 0),)), replace(E1, needs=(("svc-gms-agg", 1),))


def d():
    # a per-worker instance gates only its worker (through needs), not a whole phase
    return replace(desired_recipe(E0, S0, E1, S1, services=(ETCD, GMS0, GMS1)), gates={"infra": ("svc-etcd",)})


def s(role: str, index: int, num: int, spec: str = "new"):
    return step(role, index, spec=spec, num=num)


RUNNING = (s("svc-etcd", 0, 1, "svc"), s("svc-gms-agg", 0, 2, "svc"), s("svc-gms-agg", 1, 3, "svc"),
           s("agg", 0, 4), s("agg-e1", 0, 5), s("agg", 1, 6), s("agg-e1", 1, 7))
ALL_READY = [("svc-etcd", 0), ("svc-gms-agg", 0), ("svc-gms-agg", 1), ("agg", 0), ("agg-e1", 0), ("agg", 1),
             ("agg-e1", 1)]
ENGINES_WAIT = {"agg_0": "NEEDS_SERVICES", "agg-e1_0": "NEEDS_SERVICES", "agg_1": "NEEDS_SERVICES",
                "agg-e1_1": "NEEDS_SERVICES"}

CASES = [
    ("etcd first: the gms instances and the engines wait", observed(),
     expect(place=[("svc-etcd_0", 0, "NEW", 0)],
            waiting={**ENGINES_WAIT, "svc-gms-agg_0": "NEEDS_SERVICES", "svc-gms-agg_1": "NEEDS_SERVICES"})),
    ("etcd Ready: every worker's gms starts, no engine yet", observed(RUNNING[0], ready=[("svc-etcd", 0)]),
     expect(place=[("svc-gms-agg_0", 0, "NEW", 0), ("svc-gms-agg_1", 0, "NEW", 0)], waiting=ENGINES_WAIT)),
    ("one worker's gms Ready: that worker's engines start, the other worker's wait",
     observed(*RUNNING[:3], ready=[("svc-etcd", 0), ("svc-gms-agg", 0)]),
     expect(place=[("agg_0", 0, "NEW", 0), ("agg-e1_0", 0, "NEW", 0)],
            waiting={"agg_1": "NEEDS_SERVICES", "agg-e1_1": "NEEDS_SERVICES"})),
    ("a dead shadow engine is relaunched alone, as a restart", observed(
        *(x for x in RUNNING if x.role != "agg-e1" or x.index != 0), ready=ALL_READY,
        health={("agg-e1", 0): life(exit=(137, 90.0))}),
     expect(place=[("agg-e1_0", 0, "RELAUNCH", 1)])),
    ("a dead serving engine too: its shadow keeps running", observed(
        *(x for x in RUNNING if x.role != "agg" or x.index != 1), ready=ALL_READY,
        health={("agg", 1): life(exit=(137, 90.0))}),
     expect(place=[("agg_1", 0, "RELAUNCH", 1)])),
    ("a dead gms comes back; the running engines are left alone", observed(
        *(x for x in RUNNING if x.role != "svc-gms-agg" or x.index != 0), ready=ALL_READY,
        health={("svc-gms-agg", 0): life(exit=(1, 90.0))}),
     expect(place=[("svc-gms-agg_0", 0, "RELAUNCH", 1)])),
    ("an engine that died while its gms is down waits for it", observed(
        *(x for x in RUNNING if x.index != 0 or x.role == "svc-etcd"), ready=[("svc-etcd", 0), *[r for r in ALL_READY if r[1] == 1]],
        health={("svc-gms-agg", 0): life(exit=(1, 90.0)), ("agg-e1", 0): life(exit=(137, 90.0)),
                ("agg", 0): life(exit=(137, 90.0))}),
     expect(place=[("svc-gms-agg_0", 0, "RELAUNCH", 1)],
            waiting={"agg_0": "NEEDS_SERVICES", "agg-e1_0": "NEEDS_SERVICES"})),
]


@pytest.mark.parametrize("what, o, want", CASES, ids=[c[0] for c in CASES])
def test_failover_plan(what, o, want):
    _, rp = run(d(), o)
    assert sets(rp) == want


def test_shadow_engines_count_on_their_own_role():
    _, rp = run(d(), observed(*RUNNING, ready=ALL_READY))
    assert rp.counts["agg"].desired == 2 and rp.counts["agg-e1"].desired == 2
    assert rp.counts["svc-gms-agg"].ready == 2
