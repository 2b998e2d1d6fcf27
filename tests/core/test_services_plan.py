"""compute_services: start phases as an expectation table on hand-built state (no YAML)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from builders import desired_recipe, frontend, life, observed, service, step, unit
from builders import expect, run, sets

ETCD, NATS = service("etcd", "infra"), service("nats", "infra")
MASTER = service("master", "before_workers")
SIDECAR = service("sidecar", "after_frontend")
A0, A1, FE = unit(index=0), unit(index=1), frontend()
# a before_workers service placed on two worker nodes: instances 0 and 1
MON0 = service("mon", "before_workers")
MON1 = replace(MON0, index=1, ordinals=(1,), nodes=("n1-0",))


def s(name: str, **kw):
    return step(f"svc-{name}", 0, spec="svc", num=90 + len(name), **kw)


CASES = [
    ("infra services start first; workers and the frontend wait for them",
     desired_recipe(A0, fe=FE, services=(ETCD, NATS)), observed(),
     expect(place=[("svc-etcd_0", 0, "NEW", 0), ("svc-nats_0", 0, "NEW", 0)],
            waiting={"agg_0": "NEEDS_SERVICES", "frontend_0": "NEEDS_SERVICES"})),
    ("one infra service Ready is not enough",
     desired_recipe(A0, fe=FE, services=(ETCD, NATS)), observed(s("etcd"), s("nats"), ready=[("svc-etcd", 0)]),
     expect(waiting={"agg_0": "NEEDS_SERVICES", "frontend_0": "NEEDS_SERVICES"})),
    ("infra Ready: before_workers services start, workers still wait",
     desired_recipe(A0, fe=FE, services=(ETCD, MASTER)), observed(s("etcd"), ready=[("svc-etcd", 0)]),
     expect(place=[("svc-master_0", 0, "NEW", 0)],
            waiting={"agg_0": "NEEDS_SERVICES", "frontend_0": "NEEDS_SERVICES"})),
    ("every earlier phase Ready: the workers start, the frontend waits for one of them",
     desired_recipe(A0, A1, fe=FE, services=(ETCD, MASTER)),
     observed(s("etcd"), s("master"), ready=[("svc-etcd", 0), ("svc-master", 0)]),
     expect(place=[("agg_0", 0, "NEW", 0), ("agg_1", 0, "NEW", 0)], waiting={"frontend_0": "NEEDS_READY_WORKER"})),
    ("after_frontend waits for the frontend to be Ready",
     desired_recipe(A0, fe=FE, services=(SIDECAR,)), observed(step(index=0), ready=[("agg", 0)]),
     expect(place=[("frontend_0", 0, "NEW", 0)], waiting={"svc-sidecar_0": "NEEDS_READY_FRONTEND"})),
    ("after_frontend starts once the frontend is Ready",
     desired_recipe(A0, fe=FE, services=(SIDECAR,)),
     observed(step(index=0), step("frontend", 0, spec="fe", num=50), ready=[("agg", 0), ("frontend", 0)]),
     expect(place=[("svc-sidecar_0", 0, "NEW", 0)])),
    ("the frontend waits for with_workers services too",
     desired_recipe(A0, fe=FE, services=(service("helper", "with_workers"),)), observed(step(index=0), ready=[("agg", 0)]),
     expect(place=[("svc-helper_0", 0, "NEW", 0)], waiting={"frontend_0": "NEEDS_SERVICES"})),
    ("after_frontend waits for the infra services as well as the frontend",
     desired_recipe(A0, fe=FE, services=(ETCD, SIDECAR)),
     observed(step(index=0), step("frontend", 0, spec="fe", num=50), ready=[("agg", 0), ("frontend", 0)],
              health={("svc-etcd", 0): life(exit=(137, 90.0))}),
     expect(place=[("svc-etcd_0", 0, "RELAUNCH", 1)], waiting={"svc-sidecar_0": "NEEDS_SERVICES"})),
    ("a killed etcd comes back under the restart policy; a dead worker waits for it",
     desired_recipe(A0, fe=FE, services=(ETCD,)),
     observed(step("frontend", 0, spec="fe", num=50), ready=[("frontend", 0)],
              health={("svc-etcd", 0): life(exit=(137, 90.0)), ("agg", 0): life(exit=(137, 90.0))}),
     expect(place=[("svc-etcd_0", 0, "RELAUNCH", 1)], waiting={"agg_0": "NEEDS_SERVICES"})),
    ("a running worker is left alone while etcd is down",
     desired_recipe(A0, fe=FE, services=(ETCD,)),
     observed(step(index=0), step("frontend", 0, spec="fe", num=50), ready=[("agg", 0), ("frontend", 0)],
              health={("svc-etcd", 0): life(exit=(137, 90.0))}),
     expect(place=[("svc-etcd_0", 0, "RELAUNCH", 1)])),
    ("a service's readiness timeout replaces the recipe's startup grace",
     desired_recipe(A0, services=(service("etcd", "infra", timeout=5.0),), startup_grace=1000),
     observed(s("etcd"), health={("svc-etcd", 0): life(launched=90.0)}),
     expect(stop=[("100.94", "STARTUP_TIMEOUT")], waiting={"agg_0": "NEEDS_SERVICES"})),
    ("a service on several nodes gates its phase until every instance is Ready",
     desired_recipe(A0, fe=FE, services=(MON0, MON1)),
     observed(s("mon"), step("svc-mon", 1, spec="svc", num=95), ready=[("svc-mon", 0)]),
     expect(waiting={"agg_0": "NEEDS_SERVICES", "frontend_0": "NEEDS_SERVICES"})),
    ("every instance Ready: the workers start",
     desired_recipe(A0, fe=FE, services=(MON0, MON1)),
     observed(s("mon"), step("svc-mon", 1, spec="svc", num=95), ready=[("svc-mon", 0), ("svc-mon", 1)]),
     expect(place=[("agg_0", 0, "NEW", 0)], waiting={"frontend_0": "NEEDS_READY_WORKER"})),
    ("a service no longer declared is stopped",
     desired_recipe(A0), observed(step(index=0), s("old"), ready=[("agg", 0)]),
     expect(stop=[("100.93", "SERVICE_UNMANAGED")])),
]


@pytest.mark.parametrize("what, d, o, want", CASES, ids=[c[0] for c in CASES])
def test_start_phases(what, d, o, want):
    _, rp = run(d, o)
    assert sets(rp) == want


def test_services_count_on_their_own_roles_not_as_workers():
    d = desired_recipe(A0, services=(ETCD,), max_unavailable=1)
    _, rp = run(d, observed(s("etcd"), step(index=0), ready=[("svc-etcd", 0), ("agg", 0)]))
    assert rp.counts["svc-etcd"].ready == 1 and rp.counts["agg"].ready == 1
