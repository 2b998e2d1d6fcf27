"""Recipe -> the services it runs, with srtctl's semantics (docs/services.md upstream).

Implied first, then declared, in declaration order; a declared entry with an implied
name takes it over, ``enabled: false`` drops it. The Dynamo frontend implies etcd (and
NATS when a plane asks for it) unless discovery is by file; ``external`` launches
nothing and hands its address to the clients. Pure: raises ``ServiceError`` with the key
path of the first problem.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from reconciler.errors import ServiceError  # noqa: F401 - raised here, imported from here by callers
from reconciler.recipe.model import Recipe
from reconciler.desired.services.kinds import KINDS, NOT_YET, WORKER_PLACEMENTS, Kind
from reconciler.recipe.carried import ServiceConfig
from reconciler.world import SERVICE_PREFIX
from reconciler.desired.services.types import (  # noqa: F401 - the names callers import from here
    ALLOC_PORT, PHASES, SINGLE, WORKER_NODES, WORKER_ROLES, _ROLE, Discovery, Readiness, ServiceSpec, discovery_of)
from reconciler.recipe.topology import Endpoint, Mode, RoleLayout
from reconciler.recipe.types import check_regex

if TYPE_CHECKING:
    from reconciler.desired.services.mooncake import Store


@dataclass(frozen=True)
class Facts:
    """What resolving the services reads beyond the recipe, computed once by the topology stage
    (``desired/topology.py``) and carried on from there: the file's role layouts, workers and node
    count, the Mooncake store, the discovery plane."""

    layouts: Mapping[Mode, RoleLayout]
    endpoints: tuple[Endpoint, ...]
    nodes: int
    store: Store | None
    discovery: Discovery

def _implied(recipe: Recipe, disc: Discovery) -> dict[str, str]:
    """name -> what implies it."""
    out: dict[str, str] = {}
    if disc.backend == "etcd":
        out["etcd"] = "frontend.type: dynamo"
    nats_payload = recipe.infra is not None and recipe.infra.nats_max_payload_mb is not None
    if disc.backend != "none" and ("nats" in (disc.request_plane, disc.event_plane) or nats_payload):
        out["nats"] = "dynamo.request_plane/event_plane: nats" if not nats_payload else "infra.nats_max_payload_mb"
    return out


def resolve(recipe: Recipe, facts: Facts | None = None) -> list[ServiceSpec]:
    """``facts``: the build's (without them each is computed here, where its error was always raised)."""
    from reconciler.backends import failover
    from reconciler.desired.services import mooncake
    from reconciler.desired.services.failover import check as check_failover

    check_failover(recipe, facts.layouts if facts is not None else None)
    store = facts.store if facts is not None else mooncake.store_of(recipe)
    if store is not None:
        mooncake.check(recipe, store)
    disc = facts.discovery if facts is not None else discovery_of(recipe)
    implied = _implied(recipe, disc)
    if store is not None and store.at.startswith("engine"):
        implied[mooncake.KIND] = store.at
    if failover.config_of(recipe) is not None:
        implied[failover.GMS_KIND] = "engine.failover"
    declared = {s.name: i for i, s in enumerate(recipe.services)}
    if len(declared) != len(recipe.services):
        dup = next(s.name for i, s in enumerate(recipe.services) if declared[s.name] != i)
        raise ServiceError(f"services.{declared[dup]}.name", f"duplicate service name {dup!r}")
    out: list[ServiceSpec] = []
    for name, why in implied.items():
        if name == mooncake.KIND and store is not None:
            out.append(_implied_master(store))
        elif name not in declared:
            out.append(_implied_spec(recipe, name, why))
    for i, s in enumerate(recipe.services):
        spec = _declared(recipe, i, implied.get(s.name, ""))
        if spec is not None:
            out.append(spec)
    roles = [s.role for s in out] + [f"{s.role}-{m}" for s in out for m in s.worker_roles]
    for r in roles:
        if roles.count(r) > 1:
            raise ServiceError("services", f"two services share the step role {r!r}: rename one")
    _same_port_same_node(recipe, out, declared, facts)
    plane = {s.name: s.placement == "dedicated" for s in out if s.kind in ("etcd", "nats") and not s.external}
    if len(set(plane.values())) > 1:  # srtctl: they share the infra node, both or neither
        odd = next(n for n, d in plane.items() if not d)
        raise ServiceError(f"services.{declared.get(odd, odd)}.placement.node" if odd in declared else "services",
                           f"etcd and nats share the dedicated node: place {odd} there too (both or neither)")
    return out


def _implied_spec(recipe: Recipe, name: str, why: str) -> ServiceSpec:
    kind = KINDS[name]
    if name == "gms":
        return ServiceSpec(name, name, f"{SERVICE_PREFIX}{name}", kind.phase, None, (), (),
                           _gms_readiness(kind.ready_timeout), kind.critical, False, implied_by=why,
                           worker_roles=tuple(m for m, _ in recipe.roles.items()))
    options: tuple[tuple[str, object], ...] = ()
    if name == "nats" and recipe.infra is not None and recipe.infra.nats_max_payload_mb is not None:
        options = (("max_payload_mb", recipe.infra.nats_max_payload_mb),)
    # v1's infra.etcd_nats_dedicated_node: srtctl's dedicated placement for the implied plane
    dedicated = recipe.infra is not None and recipe.infra.etcd_nats_dedicated_node
    return ServiceSpec(name, name, f"{SERVICE_PREFIX}{name}", kind.phase, None, (), (), _default_readiness(kind),
                       kind.critical, False, options=options, implied_by=why,
                       placement="dedicated" if dedicated else "head")


def _implied_master(store) -> ServiceSpec:
    """engine.mooncake_kv_store, as the service srtctl normalises it to."""
    kind = KINDS["mooncake-master"]
    return ServiceSpec(kind.name, kind.name, f"{SERVICE_PREFIX}{kind.name}", kind.phase, None, store.extra_args, (),
                       _default_readiness(kind), kind.critical, False, container=store.container,
                       options=(("default_kv_lease_ttl_ms", store.lease_ms),), implied_by=store.at)


def _gms_readiness(timeout: float) -> Readiness:
    """srtctl's: the supervisor's own ``timeout`` fires first, the probe 30 s later."""
    from reconciler.backends import failover

    return Readiness("log", pattern=re.escape(failover.READY_MARKER), timeout=timeout + 30, interval=1.0)


def _default_readiness(kind, timeout: float | None = None, interval: float = 0.0) -> Readiness:
    timeout = kind.ready_timeout if timeout is None else timeout
    if kind.ready_path:
        return Readiness("http", port_name=kind.ready_port, path=kind.ready_path, timeout=timeout, interval=interval)
    if kind.ready_port:
        return Readiness("tcp", port_name=kind.ready_port, timeout=timeout, interval=interval)
    return Readiness("started", timeout=timeout, interval=interval)


def _declared(recipe: Recipe, i: int, implied_by: str) -> ServiceSpec | None:
    s = recipe.services[i]
    at = f"services.{i}"
    if not s.enabled:
        return None
    kind = _kind(s, at)
    slug = s.name.lower().replace("_", "-").replace(".", "-")
    if not _ROLE.fullmatch(slug):
        raise ServiceError(f"{at}.name", f"expected letters, digits, '-', '_' or '.' (at most 40), found {s.name!r}")
    for key, unsupported in _unsupported(s).items():
        raise ServiceError(f"{at}.{key}", unsupported)
    if s.external is not None and not kind.external:
        raise ServiceError(f"{at}.external", f"a {s.type} service cannot be external (etcd and nats can)")
    placement, worker_roles = _placed(recipe, s, kind, at)
    phase = s.start or kind.phase
    if phase not in PHASES:
        raise ServiceError(f"{at}.start", f"expected one of {', '.join(PHASES)}, found {phase!r}")
    _check_command_and_options(s, kind, at)
    srun = dict(s.srun_options)
    if s.cpus_per_task is not None:
        srun["cpus-per-task"] = str(s.cpus_per_task)
    if s.cpu_bind is not None:
        srun["cpu-bind"] = s.cpu_bind
    critical = kind.critical if s.critical is None else s.critical
    readiness = _readiness(s, kind, at)
    if s.type == "gms":
        readiness = _gms_readiness(float(s.readiness.timeout_seconds) if s.readiness else kind.ready_timeout)
    texts = [*(s.command or []), *s.args, *s.env.values(), s.preamble or ""]
    uses_port = any(ALLOC_PORT in str(t) for t in texts) or readiness.port_name == "port"
    if uses_port and s.type != "generic":
        raise ServiceError(f"{at}.readiness" if readiness.port_name == "port" else f"{at}.command",
                           f"{ALLOC_PORT} is a generic service's allocated port (a {s.type} service has its own)")
    return ServiceSpec(
        name=s.name, kind=s.type, role=f"{SERVICE_PREFIX}{slug}", phase=phase,
        command=tuple(map(str, s.command)) if s.command else None, args=tuple(map(str, s.args)),
        env=tuple(sorted(s.env.items())), readiness=readiness, critical=critical,
        inherit_discovery_env=s.inherit_discovery_env and s.type == "generic",
        external=s.external, preamble=s.preamble, options=tuple(sorted(s.options.items())),
        srun_options=tuple(sorted((k, str(v)) for k, v in srun.items())), container=s.container,
        implied_by=implied_by, worker_roles=worker_roles, port_names=("port",) if uses_port else (),
        placement=placement,
    )


def _kind(s: ServiceConfig, at: str) -> Kind:
    """The service's kind, or a located error for a type the reconciler does not (yet) run."""
    if s.type in NOT_YET:
        raise ServiceError(f"{at}.type", f"unsupported feature: service type {s.type!r} "
                                         f"(the reconciler runs {', '.join(KINDS)})")
    kind = KINDS.get(s.type)
    if kind is None:
        raise ServiceError(f"{at}.type", f"unknown service type {s.type!r} (expected one of "
                                         f"{', '.join(KINDS)}, or later {', '.join(NOT_YET)})")
    return kind


def _placed(recipe: Recipe, s: ServiceConfig, kind: Kind, at: str) -> tuple[str, tuple[str, ...]]:
    """(where the service runs, the roles whose workers each get an instance: per-worker only)."""
    # a gms service is per worker unless it says otherwise (srtctl's default_per), and then it is refused
    per_given = s.placement is not None and "per" in s.placement.model_fields_set
    per_worker = (per_given and s.placement.per == "worker") or (s.type == "gms" and not per_given)
    placement = s.placement.node if s.placement and "node" in s.placement.model_fields_set else \
        ("workers" if per_worker else "head")
    if per_worker:
        if placement not in WORKER_PLACEMENTS:
            raise ServiceError(f"{at}.placement.node", f"a per-worker service is placed on workers: expected one "
                                                       f"of {', '.join(WORKER_PLACEMENTS)}, found {placement!r}")
        worker_roles = tuple(m for m, _ in recipe.roles.items() if placement in ("workers", m))
        if not worker_roles:
            raise ServiceError(f"{at}.placement.node", f"the recipe has no {placement} role")
        if s.readiness is not None and any(getattr(s.readiness, k) is not None for k in ("port", "tcp", "http")):
            raise ServiceError(f"{at}.readiness", "the instances of one node share its network: a per-worker "
                                                  "service's readiness must be a log probe")
        return placement, worker_roles
    if s.type == "gms":
        raise ServiceError(f"{at}.placement.per", "a gms service runs one instance per worker: placement.per "
                                                  "must be worker")
    if placement not in (*SINGLE, *WORKER_NODES):
        raise ServiceError(f"{at}.placement.node", f"expected one of {', '.join((*SINGLE, *WORKER_NODES))}, "
                                                   f"found {placement!r}")
    if placement not in kind.placements:
        raise ServiceError(f"{at}.placement.node", f"a {s.type} service cannot be placed on {placement!r} "
                                                   f"(it takes {', '.join(kind.placements)})")
    if placement in ("prefill", "decode", "agg") and placement not in dict(recipe.roles.items()):
        raise ServiceError(f"{at}.placement.node", f"the recipe has no {placement} role (it has "
                                                   f"{', '.join(m for m, _ in recipe.roles.items())})")
    return placement, ()


def _check_command_and_options(s: ServiceConfig, kind: Kind, at: str) -> None:
    """The command, the names etcd and nats keep for themselves, and the kind's options."""
    if s.type == "generic" and not s.command:
        raise ServiceError(f"{at}.command", "a generic service needs a command (an argv list)")
    for j, a in enumerate([*(s.command or []), *s.args]):
        if not str(a).strip():
            raise ServiceError(f"{at}.command", f"entry {j} is blank")
    if s.name in ("etcd", "nats") and s.type != s.name:
        raise ServiceError(f"{at}.type", f"the name {s.name!r} is the implied {s.name} service: declare it with "
                                         f"type: {s.name}, or pick another name")
    if s.type in ("etcd", "nats") and s.name != s.type:
        raise ServiceError(f"{at}.name", f"a {s.type} service is named {s.type!r} (it takes the implied one over); "
                                         "one per recipe")
    mb = s.options.get("max_payload_mb")
    if mb is not None and (isinstance(mb, bool) or not isinstance(mb, int) or mb < 1):
        raise ServiceError(f"{at}.options.max_payload_mb", f"expected a whole number of MB >= 1, found {mb!r}")
    unknown = sorted(set(s.options) - set(kind.options))
    if unknown:
        raise ServiceError(f"{at}.options.{unknown[0]}", f"unknown option for a {s.type} service"
                           + (f" (known: {', '.join(kind.options)})" if kind.options else " (it takes none)"))


def _unsupported(s) -> dict[str, str]:
    out = {}
    if s.source is not None or s.build_command:
        # a reconciled service relaunches at any time on any node: no checkout-and-build per launch
        out["source" if s.source is not None else "build_command"] = (
            "unsupported feature: building a service from source (install it into the image or host)")
    if s.nodes:
        out["nodes"] = "unsupported feature: service-owned node pools"
    if s.placement and s.placement.pool:
        out["placement.pool"] = "unsupported feature: service-owned node pools"
    if s.placement and s.placement.per not in ("node", "worker"):
        out["placement.per"] = f"expected node or worker, found {s.placement.per!r}"
    if s.terminal:
        out["terminal"] = "a terminal service ends a batch run; a reconciled deployment has no end"
    return out


def _readiness(s, kind, at: str) -> Readiness:
    r = s.readiness
    if r is None:
        # srtctl: a generic service without a probe is up once launched
        return _default_readiness(kind) if kind.ready_port else Readiness("started")
    given = [k for k in ("port", "tcp", "http", "log", "file") if getattr(r, k) is not None]
    if len(given) > 1:
        raise ServiceError(f"{at}.readiness", f"name exactly one probe, found {', '.join(given)}")
    t, iv = float(r.timeout_seconds), float(r.interval_seconds)
    if r.port is not None or r.tcp is not None:
        return Readiness("tcp", **_probe_port(r.port if r.port is not None else r.tcp.port), timeout=t, interval=iv)
    if r.http is not None:
        return Readiness("http", **_probe_port(r.http.port), path=r.http.path, status=r.http.status, timeout=t,
                         interval=iv)
    if r.log is not None:
        try:
            check_regex(r.log.pattern)
        except ValueError as e:
            raise ServiceError(f"{at}.readiness.log.pattern", str(e)) from None
        return Readiness("log", pattern=r.log.pattern, timeout=t, interval=iv)
    if r.file is not None:
        for key in sorted(set(r.file) - {"path"}):
            raise ServiceError(f"{at}.readiness.file.{key}", "unknown key (a file probe takes only path)")
        path = r.file.get("path")
        if not isinstance(path, str) or not path or "\0" in path:
            raise ServiceError(f"{at}.readiness.file.path", "expected a file path")
        if not path.startswith("/") and ".." in path.split("/"):
            raise ServiceError(f"{at}.readiness.file.path",
                               f"a relative path stays under the job's log directory (no '..'), found {path!r}")
        return Readiness("file", file=path, timeout=t, interval=iv)
    return _default_readiness(kind, t, iv)


def _probe_port(port: int | str) -> dict:
    # "{port}": probe the port the allocator gives this service, whatever number it is this time
    return {"port_name": "port"} if port == ALLOC_PORT else {"port": port}


def _same_port_same_node(recipe: Recipe, specs: list[ServiceSpec], declared: dict[str, int],
                         facts: Facts | None) -> None:
    """srtctl: two services probing the same fixed port on one node are refused before anything runs."""
    from reconciler.backends.registry import engines
    from reconciler.desired.services.layout import file_layout, instance_ordinals

    if not any(not s.external and s.readiness.port is not None for s in specs):
        return  # no fixed readiness port to collide: no layout to lay out for it
    if facts is None:
        bound = engines(recipe)
        eps, nodes = tuple(bound.endpoints()), bound.allocation.nodes
    else:
        eps, nodes = facts.endpoints, facts.nodes
    lay = file_layout(eps, nodes, specs)
    seen: dict[tuple[int, int], str] = {}
    for s in specs:
        if s.external or s.readiness.port is None:
            continue
        for _, o in instance_ordinals(lay, s):
            other = seen.setdefault((s.readiness.port, o), s.name)
            if other != s.name:
                raise ServiceError(f"services.{declared.get(s.name, '?')}.readiness",
                                   f"port {s.readiness.port} is also {other}'s readiness port on the same node: "
                                   "give them disjoint placements or ports (or {port})")
