"""vLLM: one srun step per process; prefill / decode / agg.

Behind Dynamo each worker runs ``python3 -m dynamo.vllm``; behind every other
frontend ``vllm serve <model>`` directly. Disaggregated workers get a
``--kv-transfer-config`` from the connector table. A worker spanning several nodes
runs vLLM's per-node data parallel: the leader serves, the others run headless.
"""

from __future__ import annotations

import json
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict
from pydantic.dataclasses import dataclass

from reconciler.backends.base import Backend, HealthProbe, Runtime, cli_args, get_key, pop_keys
from reconciler.topology import Mode, Process

# connector name -> vLLM KVTransferConfig connector class
CONNECTORS: dict[str, str] = {
    "nixl": "NixlConnector",
    "lmcache": "LMCacheConnectorV1",
    "lmcache-mp": "LMCacheMPConnector",
    "kvbm": "DynamoConnector",
    "moriio": "MoRIIOConnector",
}
KV_ROLES: dict[str, str] = {"prefill": "kv_producer", "decode": "kv_consumer", "agg": "kv_both"}
MANAGED = frozenset({"host", "port", "model", "data-parallel-address", "data-parallel-rpc-port", "data-parallel-start-rank", "headless"})


class VLLMFailoverConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    shadow_engines: int = 1
    shared_dir: str = "/dev/shm"
    restart: str | bool | None = None
    restart_backoff_seconds: float | None = None


@dataclass(frozen=True, config=ConfigDict(extra="forbid"))
class VLLMBackend(Backend):
    """vLLM engine (``engine.type: vllm``)."""

    type: Literal["vllm"] = "vllm"
    set_visible_devices: bool = False
    set_cuda_visible_devices: bool | None = None
    connector: str | None = "nixl"
    failover: VLLMFailoverConfig | None = None
    served_model_name: str | None = None
    allow_prefill_decode_colocation: bool = False
    allow_prefill_decode_colocation_across_nodes: bool = False
    dp_launch_mode: Literal["per_gpu", "per_node"] = "per_node"
    vllm_serve_binary: str = "vllm"

    carried_knobs: ClassVar[dict[str, str]] = {
        "failover": "shadow engines need the Dynamo frontend and a GMS service, which the reconciler does not run yet",
        "allow_prefill_decode_colocation": "not read; decode shares the prefill nodes only with roles.decode.nodes: colocate",
        "allow_prefill_decode_colocation_across_nodes":
            "not read; decode shares the prefill nodes only with roles.decode.nodes: colocate",
        "dp_launch_mode": "per_gpu (deprecated in srtctl) is not run: data-parallel workers launch one process per node",
    }

    def should_set_visible_devices(self) -> bool:
        # set_cuda_visible_devices: the older spelling, still in srt-slurm's examples
        return self.set_visible_devices or bool(self.set_cuda_visible_devices)

    @property
    def _dynamo(self) -> bool:
        return self.recipe.frontend.type == "dynamo"

    def port_names(self, mode: Mode) -> tuple[str, ...]:
        return ("http", "nixl", "system") if self._dynamo else ("http", "nixl")

    def leader_port_names(self, mode: Mode) -> tuple[str, ...]:
        return ("dp_rpc",)

    def get_served_model_name(self, default: str) -> str:
        return self.served_model_name or super().get_served_model_name(default)

    def connector_for_mode(self, mode: Mode, args: dict) -> str | None:
        raw = pop_keys(args, "connector")
        name = raw if raw is not None else self.connector
        if mode == "agg" and raw is None:
            return None
        if name is None or name == "none":
            return None
        if name in CONNECTORS:
            return json.dumps({"kv_connector": CONNECTORS[name], "kv_role": KV_ROLES[mode]}, separators=(",", ":"))
        return str(name)  # a raw JSON KVTransferConfig

    def build_worker_command(self, process: Process, runtime: Runtime) -> list[str]:
        args = self.get_config_for_mode(process.mode)
        pop_keys(args, *MANAGED)
        kv = None if get_key(args, "kv-transfer-config") else self.connector_for_mode(process.mode, args)
        if self._dynamo:
            argv = ["python3", "-m", "dynamo.vllm", "--model", runtime.model_path]
            if process.mode == "prefill":
                argv.append("--is-prefill-worker")
        else:
            argv = [self.vllm_serve_binary, "serve", runtime.model_path]
        argv += ["--host", "0.0.0.0", "--port", str(process.ports["http"])]
        if kv:
            argv += ["--kv-transfer-config", kv]
        if len(process.hosts) > 1:
            tp = int(get_key(args, "tensor-parallel-size", "tp") or 1)
            local = max(1, len(process.gpus) // tp)
            argv += [
                "--data-parallel-size-local", str(local),
                "--data-parallel-start-rank", str(process.node_rank * local),
                "--data-parallel-address", process.leader,
                "--data-parallel-rpc-port", str(process.ports["dp_rpc"]),
            ]
            if process.node_rank > 0:
                argv.append("--headless")
        if not self.should_set_visible_devices() and process.gpus:
            # srtctl's default: the engine picks its GPUs, no environment mask
            argv += ["--device-ids", ",".join(map(str, sorted(process.gpus)))]
        return argv + cli_args(args)

    def get_process_environment(self, process: Process) -> dict[str, str]:
        env = {"VLLM_NIXL_SIDE_CHANNEL_PORT": str(process.ports["nixl"]), "VLLM_NIXL_SIDE_CHANNEL_HOST": process.node}
        if self._dynamo:
            env |= {"DYN_SYSTEM_ENABLED": "true", "DYN_SYSTEM_PORT": str(process.ports["system"])}
        return env

    def health_probe(self, mode: Mode) -> HealthProbe:
        return HealthProbe("system" if self._dynamo else "http", "/health")

    def fatal_log_patterns(self, mode: Mode) -> tuple[str, ...]:
        return (r"EngineDeadError", r"Engine core proc .* died unexpectedly")
