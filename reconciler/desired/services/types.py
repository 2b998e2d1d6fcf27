"""What a recipe's services resolve to (``spec.resolve``): plain frozen data the unit sources read."""

from __future__ import annotations

import re
from dataclasses import dataclass

from reconciler.recipe.model import Recipe

PHASES = ("infra", "before_workers", "with_workers", "after_frontend")
WORKER_ROLES = ("prefill", "decode", "agg", "frontend")
ALLOC_PORT = "{port}"
SINGLE = ("head", "infra", "dedicated")  # one instance
# one instance per distinct node of: that role's workers; every worker (compute: there are no
# service-owned pools here); every node of the recipe
WORKER_NODES = ("prefill", "decode", "agg", "workers", "compute", "all")
_ROLE = re.compile(r"^[a-z][a-z0-9-]{0,39}$")


@dataclass(frozen=True)
class Readiness:
    """One probe per instance: tcp/http on a port (fixed, or one the kind allocates), a log line, a file."""

    kind: str  # tcp | http | log | file | started
    port: int | None = None
    port_name: str | None = None
    path: str = "/"
    status: int = 200
    pattern: str = ""
    file: str = ""
    timeout: float = 120.0
    interval: float = 2.0


@dataclass(frozen=True)
class ServiceSpec:
    name: str
    kind: str
    role: str  # the unit role in step labels: svc-<name>
    phase: str
    command: tuple[str, ...] | None  # None: the kind builds it from its ports
    args: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    readiness: Readiness
    critical: bool
    inherit_discovery_env: bool
    external: str | None = None
    preamble: str | None = None
    options: tuple[tuple[str, object], ...] = ()
    srun_options: tuple[tuple[str, str], ...] = ()
    container: str | None = None
    implied_by: str = ""
    # placement.per: worker: one instance per worker of these roles, in its device view (per_worker.py)
    worker_roles: tuple[str, ...] = ()

    @property
    def per_worker(self) -> bool:
        return bool(self.worker_roles)
    port_names: tuple[str, ...] = ()  # a generic service's allocated ports: ("port",) when it uses {port}
    placement: str = "head"  # head | infra | dedicated (one instance) or a worker-node set (one per node)


@dataclass(frozen=True)
class Discovery:
    """How Dynamo components find each other: etcd (+ NATS) services, or a shared directory."""

    backend: str  # etcd | file | none
    file_dir: str | None = None
    request_plane: str = "tcp"
    event_plane: str | None = None


def discovery_of(recipe: Recipe) -> Discovery:
    if recipe.frontend.type != "dynamo":
        return Discovery("none")
    rc, d = recipe.reconcile, recipe.dynamo
    backend = rc.discovery or "etcd"
    event = d.event_plane or ("zmq" if backend == "file" else None)
    return Discovery(backend, rc.discovery_dir, d.request_plane, event)
