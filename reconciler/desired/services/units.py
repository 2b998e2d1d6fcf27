"""Service specs -> units (on the head node, or one per node of a worker-node placement), and the
discovery environment clients get.

A service instance is a unit like a worker (role ``svc-<name>``, index = instance): labelled step,
observed, probed, relaunched under the restart policy. Its ports come from the same
cross-recipe allocator, owned by the unit, so a relaunch keeps them. etcd and NATS start
from a fresh data directory each life, as srtctl's do. The Mooncake master keeps
nothing on disk, and its address reaches the workers through ``services.mooncake``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from reconciler.core.ports import NodePortAllocator
from reconciler.recipe.model import Recipe
from reconciler.desired.services import mooncake
from reconciler.desired.services.kinds import KINDS, PROGRAMS
from reconciler.desired.services.mooncake import Wiring
from reconciler.desired.services.layout import NodeLayout, instance_ordinals
from reconciler.desired.services.types import Discovery, ServiceSpec
from reconciler.world import Launch, Unit, life_name

# srtctl's placeholders that make sense for one instance on the head node, and {port} (the
# allocator's port for a generic service, the reconciler's own); other braces stay
_PLACEHOLDER = re.compile(r"\{(node|node_ip|head_node|head_ip|infra_node|infra_ip|index|role|node_id|port)\}")
# a fresh data directory per life, then the program: argv only, no recipe text in the script
_FRESH = 'rm -rf -- "$1" && mkdir -p -- "$1" && shift && exec "$@"'
_PREAMBLE = '{preamble}\nexec "$@"'


# kinds whose address the workers are given: without the head node their spec is unknown
ADDRESSED_KINDS = ("etcd", "nats", "mooncake-master")
# kinds with two life slots: on a hand-over the new life starts on the successor beside the old
# one (its own ports, data directory and config), the units that read its address move to the
# new one, and the old life stays until none of theirs is left (a whole stack moves, no gap)
MOVING_KINDS = ("etcd", "nats")


def host_of(spec: ServiceSpec, head: str | None, dedicated: str | None) -> str | None:
    """Where a single-instance service runs (None: that node is not running yet)."""
    return dedicated if spec.placement == "dedicated" else head


def mooncake_wiring(recipe: Recipe, specs: list[ServiceSpec], store: mooncake.Store | None, head: str | None,
                    ports: NodePortAllocator, config_dir: str, served_model_name: str,
                    dedicated: str | None = None) -> Wiring | None:
    """The Mooncake master's address and config files for the workers (None without a master);
    ``store``: the recipe's (``mooncake.store_of``, computed once by the topology stage)."""
    spec = next((s for s in specs if s.kind == mooncake.KIND), None)
    host = host_of(spec, head, dedicated) if spec is not None else None
    if spec is None or store is None or host is None:
        return None
    return mooncake.wiring(recipe, store, host, ports_of(spec, recipe.name, host, ports), config_dir,
                           served_model_name)


def ports_of(spec: ServiceSpec, recipe: str, node: str, ports: NodePortAllocator, index: int = 0,
             slot: int = 0) -> dict[str, int]:
    owner = f"{recipe}/{life_name(f'{spec.role}_{index}', slot)}"  # slot 0: the name before slots existed
    return {n: ports.allocate(node, owner, n) for n in (*KINDS[spec.kind].port_names, *spec.port_names)}


def discovery_env(recipe: Recipe, specs: list[ServiceSpec], disc: Discovery, head: str | None,
                  ports: NodePortAllocator, state_dir: Path, dedicated: str | None = None,
                  slots: Mapping[str, int] | None = None) -> dict[str, str]:
    """What the Dynamo frontend, its workers and inheriting services get (empty without Dynamo).
    ``slots``: service role -> the life slot its current life is in (the address clients get)."""
    if disc.backend == "none":
        return {}
    env = {"DYN_REQUEST_PLANE": disc.request_plane}
    if head is not None:
        env["HEAD_NODE_IP"] = head  # srtctl: the head node's IP (reconciler.desired.netaddr resolves it on workers)
    if disc.event_plane:
        env["DYN_EVENT_PLANE"] = disc.event_plane
    if disc.backend == "file":
        env["DYN_DISCOVERY_BACKEND"] = "file"
        env["DYN_FILE_KV"] = disc.file_dir or str(Path(state_dir).absolute() / recipe.name / "discovery")
    for s in specs:
        if s.kind not in ("etcd", "nats"):  # the discovery plane; the Mooncake master is mooncake_wiring's
            continue
        var, scheme = ("ETCD_ENDPOINTS", "http") if s.kind == "etcd" else ("NATS_SERVER", "nats")
        if s.external:
            env[var] = s.external
        elif (host := host_of(s, head, dedicated)) is not None:
            slot = (slots or {}).get(s.role, 0)
            env[var] = f"{scheme}://{host}:{ports_of(s, recipe.name, host, ports, 0, slot)['client']}"
    return env


def instances(lay: NodeLayout, specs: list[ServiceSpec], head: str,
              nodes: Mapping[int, str] | None = None) -> list[tuple[ServiceSpec, int, int, str, str]]:
    """(spec, index, ordinal, node, infra node) of every shared instance whose node is known
    (``nodes``: ordinal -> hostname of running allocations), in spec then instance order."""
    out = []
    known = {0: head, **(nodes or {})}
    ded = lay.dedicated
    infra = known.get(ded) if ded is not None else head  # srtctl's infra node: the dedicated one when reserved
    for s in specs:
        if s.external or s.per_worker:  # per-worker instances: services/per_worker.py
            continue
        if infra is None and any(re.search(r"\{infra_(node|ip)\}", t) for t in _texts(s)):
            continue  # it names the dedicated node, not running yet: it waits (its spec is unknown)
        out += [(s, i, o, known[o], infra or head) for i, o in instance_ordinals(lay, s) if o in known]
    return out


def _texts(s: ServiceSpec) -> list[str]:
    return [*(s.command or ()), *s.args, *(v for _, v in s.env), s.preamble or ""]


def service_unit(recipe: Recipe, s: ServiceSpec, head: str, ports: NodePortAllocator, state_dir: Path,
                 disc_env: Mapping[str, str], container: str | None, index: int, ordinal: int, node: str,
                 infra: str, slot: int = 0) -> Unit:
    """One instance of a shared service (its spec hash is the pipeline's last pass). ``slot``: its
    life slot (``MOVING_KINDS`` only): slot 1 has its own ports, data directory and config file."""
    kind = KINDS[s.kind]
    rdir = Path(state_dir).absolute() / recipe.name
    p = ports_of(s, recipe.name, node, ports, index, slot)
    data_dir = str(rdir / "services" / life_name(s.role, slot))
    files: dict[str, str] = {}
    if s.kind != "generic":
        # a typed kind's command only replaces the program: the flags carry the allocated ports
        program = s.command[0] if s.command else PROGRAMS[s.kind]
        conf_path = str(rdir / "configs" / f"{life_name(s.role, slot)}.conf")
        text = kind.config_text(p, data_dir, dict(s.options))
        if text is not None:
            files[conf_path] = text
        argv = kind.command(program, node, p, data_dir, conf_path if text is not None else None, dict(s.options))
        argv = [*argv, *(s.command or ())[1:], *s.args]
        if kind.fresh_data:
            argv = ["/bin/sh", "-c", _FRESH, f"{s.role}-fresh", data_dir, *argv]
    values = {"node": node, "node_ip": node, "head_node": head, "head_ip": head, "infra_node": infra,
              "infra_ip": infra, "index": str(index), "role": s.placement, "node_id": str(ordinal)} | {
        k: str(v) for k, v in p.items()}

    def fill(text: str) -> str:
        # a typed kind's own ports are not {port}; its text keeps such braces as written
        return _PLACEHOLDER.sub(lambda m: values.get(m[1], m[0]), text) if s.kind == "generic" else text

    if s.kind == "generic":
        argv = [fill(a) for a in (*(s.command or ()), *s.args)]
    if s.preamble:
        argv = ["/bin/bash", "-c", _PREAMBLE.format(preamble=fill(s.preamble)), s.role, *argv]
    env = dict(disc_env) if s.inherit_discovery_env else {}
    env |= {"PYTHONUNBUFFERED": "1"} | {k: fill(v) for k, v in s.env}
    launch = Launch(0, (node,), 1, None, tuple(argv), tuple(sorted(env.items())))
    r = s.readiness
    port = r.port if r.port is not None else (p.get(r.port_name) if r.port_name else None)
    probe_arg = {"log": r.pattern, "file": str(rdir / fill(r.file)), "http": str(r.status)}.get(r.kind, "")
    ctr = (s.container or container) if kind.job_container else (s.container or None)
    srun = tuple(sorted({**recipe.srun_options, **dict(s.srun_options)}.items()))  # + the container's: passes.wrap
    return Unit(
        recipe=recipe.name, role=s.role, index=index, ordinals=(ordinal,), nodes=(node,), gpus=(), ports=p,
        launches=(launch,), container=ctr, files=files, health_port=port, health_path=r.path, slot=slot,
        probe=r.kind, probe_arg=probe_arg, phase=s.phase, startup_timeout=r.timeout,
        critical=s.critical, srun_options=srun, probe_interval=r.interval,
    )
