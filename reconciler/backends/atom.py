"""ATOM (``engine.type: atom``): AMD's native ROCm OpenAI server, behind the AToMesh router.

As srtctl: every process runs ``python3 -m atom.entrypoints.openai_server --model M --host
0.0.0.0 --server-port P -tp <its GPUs>``, then ``--kv-transfer-config`` when it has one, then
the role's ``args`` sorted by key in ATOM's own spelling (hyphens and underscores kept:
its CLI mixes both); ``ATOM_HOST_IP`` names the process's node. One Slurm node per logical
worker. Prefill and decode processes get a Mooncake connector entry (producer / consumer)
with their node as ``proxy_ip`` and an allocator-owned handshake port; ``args.extra-kv-
connectors`` are added to it (``lmcache_mp`` pointed at the node-local LMCache port 8750
unless the recipe says otherwise), several connectors wrapped in a ``multi`` one. Readiness:
GET /health on the server port. Needs a ROCm GPU: rendered and golden-tested here, never run.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar


from reconciler.backends.base import Backend, HealthProbe, ProcessGroup, Runtime, _norm, _scalar
from reconciler.recipe.engines import AtomEngine
from reconciler.recipe.topology import Endpoint, Mode, Process, TopologyError

MANAGED = ("model", "host", "server-port", "tp", "tensor-parallel-size", "kv-transfer-config")
EXTRA_CONNECTORS = "extra-kv-connectors"
LMCACHE_MP_PORT = 8750  # the node-local lmcache-server service (docs/services.md: 8750/8751)
KV_ROLE = {"prefill": "kv_producer", "decode": "kv_consumer"}


class AtomBackend(AtomEngine, Backend):
    """ATOM engine on ROCm (``engine.type: atom``)."""

    process_exporter_groups: ClassVar[tuple[ProcessGroup, ...]] = (
        ProcessGroup("atom_server", cmdline=(r"atom\.entrypoints\.openai_server",)),
    )

    def allocate_endpoints(self) -> list[Endpoint]:
        fe = self.recipe.frontend.type
        if fe != "atomesh":
            raise TopologyError("frontend.type", f"engine atom requires frontend.type: atomesh (found {fe!r})")
        for mode in self._own_modes():
            role = self.recipe.roles.get(mode)
            managed = sorted(k for k in role.args if _norm(k) in MANAGED)
            if managed:
                raise TopologyError(f"roles.{mode}.args.{managed[0]}", "set by the reconciler for ATOM (model, host, "
                                    "server-port, tp, tensor-parallel-size, kv-transfer-config): remove it")
            extra = role.args.get(EXTRA_CONNECTORS)
            if extra is not None and not (isinstance(extra, list) and all(isinstance(c, dict) for c in extra)):
                raise TopologyError(f"roles.{mode}.args.{EXTRA_CONNECTORS}", "expected a list of connector mappings")
        endpoints = super().allocate_endpoints()
        for ep in endpoints:
            if ep.mode in self._own_modes() and len(ep.nodes) > 1:
                raise TopologyError(f"roles.{ep.mode}", f"ATOM needs each logical worker on one Slurm node; "
                                    f"{ep.name} spans {len(ep.nodes)} (fewer GPUs per worker, or more per node)")
        return endpoints

    def port_names(self, mode: Mode) -> tuple[str, ...]:
        return ("http", "handshake") if mode in KV_ROLE else ("http",)

    def build_worker_command(self, process: Process, runtime: Runtime) -> list[str]:
        args = self.get_config_for_mode(process.mode)
        extra = args.pop(EXTRA_CONNECTORS, None) or []
        argv = [runtime.engine_python, "-m", "atom.entrypoints.openai_server", "--model", runtime.model_path,
                "--host", "0.0.0.0", "--server-port", str(process.ports["http"]), "-tp", str(len(process.gpus))]
        kv = self.kv_transfer_config(process, extra)
        if kv is not None:
            argv += ["--kv-transfer-config", json.dumps(kv, separators=(",", ":"))]
        return argv + atom_args(args)

    def kv_transfer_config(self, process: Process, extra: list[dict[str, Any]]) -> dict[str, Any] | None:
        connectors: list[dict[str, Any]] = []
        if process.mode in KV_ROLE:
            entry: dict[str, Any] = {"kv_role": KV_ROLE[process.mode], "kv_connector": self.connector,
                                     "proxy_ip": process.node, "handshake_port": process.ports["handshake"]}
            if self.mooncake_protocol:
                entry["protocol"] = self.mooncake_protocol
            connectors.append(entry)
        for c in extra:
            if c.get("kv_connector") == "lmcache_mp":
                c = {**c, "kv_connector_extra_config": {"lmcache.mp.port": LMCACHE_MP_PORT,
                                                        **(c.get("kv_connector_extra_config") or {})}}
            connectors.append(c)
        if not connectors:
            return None
        return connectors[0] if len(connectors) == 1 else {"kv_connector": "multi", "connectors": connectors}

    def get_process_environment(self, process: Process) -> dict[str, str]:
        # srtctl resolves the node's IP on runtime.network_interface; here the node's name
        return {"ATOM_HOST_IP": process.node}

    def health_probe(self, mode: Mode) -> HealthProbe:
        return HealthProbe("http", "/health")

    @property
    def prometheus_metrics_path(self) -> str | None:  # type: ignore[override]
        return None  # native ATOM servers expose no Prometheus metrics (srtctl scrapes none)


def atom_args(args: dict[str, Any]) -> list[str]:
    """ATOM's spelling, as srtctl renders it: keys sorted, ``--`` + the key as written (a key
    that starts with '-' is used as is), True a bare flag, False/None dropped, a list the flag
    then each item. A mapping value is passed as compact JSON."""
    out: list[str] = []
    for key in sorted(args):
        value = args[key]
        flag = key if key.startswith("-") else f"--{key}"
        if value is True:
            out.append(flag)
        elif value is False or value is None:
            continue
        elif isinstance(value, (list, tuple)):
            out += [flag, *(_scalar(v) for v in value)]
        else:
            out += [flag, _scalar(value)]
    return out
