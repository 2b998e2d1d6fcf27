"""compute_dependents: when a service gets a new life, the units that registered with its old one
are relaunched with it (pure).

Measured (issue 27): etcd killed under a Dynamo stack is back in 1-2 s, but ``dynamo.frontend``
and ``dynamo.mocker`` keep running without their registrations, answer 404 "model not found", and
only exit 15-27 s later, then wait out their own backoff. So a unit's dependency on a service is
acted on: once the service's new life is Ready, every running unit launched before that life is
stopped on purpose (``StopReason.DEPENDENCY_RESTARTED``): its relaunch is immediate and is no
restart (no backoff counted against it).

The graph is derived from the recipe as rendered, never hand-listed: a unit depends on a service
when its environment, command line or files name the service's address (``host:port`` of any of
its ports: what reads ``ETCD_ENDPOINTS``, ``NATS_SERVER``, the Mooncake master address, a generic
service's ``{port}``), or when it lists the service in ``Unit.needs`` (a failover engine's gms).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from reconciler.core.plan.classify import Classified
from reconciler.core.plan.results import CancelStep, StopReason
from reconciler.world import DesiredRecipe, Step, Unit

UnitKey = tuple[str, int]


def dependents(d: DesiredRecipe) -> Mapping[UnitKey, tuple[UnitKey, ...]]:
    """service (role, index) -> the units that read its address, in a stable order: the graph the
    desired build computed once with the units (``DesiredRecipe.dependents``, kept with its build
    cache); a desired recipe made otherwise (by hand, in a test) has it computed here."""
    return d.dependents if d.dependents is not None else graph(d.services, d.all_units)


def graph(services: Sequence[Unit], units: Sequence[Unit]) -> dict[UnitKey, tuple[UnitKey, ...]]:
    """service (role, index) -> the units among ``units`` that read its address (``host:port`` of
    any of its ports, in their argv, environment or files) or list it in ``Unit.needs``."""
    where: dict[str, UnitKey] = {}
    for s in services:
        if s.nodes:
            for port in s.ports.values():
                where[f"{s.nodes[0]}:{port}"] = (s.role, s.index)
    out: dict[UnitKey, list[UnitKey]] = {}
    for u in units:
        key = (u.role, u.index)
        found = {n for n in u.needs if n != key}
        if where:  # no service address: nothing to look for in what the unit reads
            text = "\n".join([*(a for l in u.launches for a in l.argv), *(v for l in u.launches for _, v in l.env),
                              *u.files.values()])
            found |= {svc for addr, svc in where.items() if svc != key and _names(text, addr)}
        for svc in found:
            out.setdefault(svc, []).append(key)
    return {svc: tuple(sorted(keys)) for svc, keys in out.items()}


def _names(text: str, addr: str) -> bool:
    """``addr`` (host:port) appears in ``text`` and is not the prefix of a longer port."""
    start = text.find(addr)
    while start >= 0:
        end = start + len(addr)
        # a whole host:port, not the tail of a longer host name (gpu-node1 for node1) nor the head
        # of a longer port: an occurrence that fails either test does not end the search
        if (end == len(text) or not text[end].isdigit()) and (
                start == 0 or not (text[start - 1].isalnum() or text[start - 1] in "-._")):
            return True
        start = text.find(addr, start + 1)
    return False


def compute_dependents(d: DesiredRecipe, c: Classified) -> tuple[CancelStep, ...]:
    """Running units launched before the current, Ready life of a service they depend on."""
    views = {v.key: v for v in c.units}
    stops: list[CancelStep] = []
    seen: set[UnitKey] = set()
    for svc, units in dependents(d).items():
        sv = views.get(svc)
        sh = sv.health if sv else None
        # a new life: launched more than once, running and Ready now (the dependents come back to it)
        if sv is None or sh is None or sh.launches < 2 or sh.last_launch is None or not sv.ready or not sv.current:
            continue
        for key in units:
            v = views.get(key)
            h = v.health if v else None
            if v is None or key in seen or h is None or h.last_launch is None or not v.current:
                continue
            if h.last_launch < sh.last_launch and all(isinstance(s, Step) and s.cancellable for s in v.current):
                seen.add(key)
                stops += [CancelStep(s.step_id, d.name, v.name, StopReason.DEPENDENCY_RESTARTED,
                                     f"{sv.name} has a new life") for s in v.current]
    return tuple(stops)
