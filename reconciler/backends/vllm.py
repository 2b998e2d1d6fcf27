"""vLLM: one srun step per node of a worker; prefill / decode / agg.

Behind Dynamo each worker runs ``python3 -m dynamo.vllm`` (no --host/--port: Dynamo
owns them; ``--disaggregation-mode`` per role, as Dynamo >= 1.0 reads it); behind
every other frontend ``vllm serve <model>``. The layout of a worker follows srtctl:

* data parallel whose replica (TP x PP) fits on a node: one process per node with its
  local DP ranks and hybrid load balancing, every node serving (no --headless);
* a replica spanning nodes, or no DP on several nodes: torch rendezvous
  (--master-addr/--nnodes/--node-rank), followers --headless.

vLLM opens the NIXL side channel at base + DP rank and KV events at base + local rank,
so those are blocks of consecutive ports.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from typing import ClassVar


from reconciler.backends.base import Backend, HealthProbe, ProcessGroup, Runtime, cli_args, get_key, pop_keys
from reconciler.recipe.engines import VLLMEngine
from reconciler.recipe.topology import Endpoint, Mode, Process

# connector name -> the KVTransferConfig srtctl passes (Dynamo's own table agrees: kv_both)
CONNECTORS: dict[str, dict] = {
    "nixl": {"kv_connector": "NixlConnector", "kv_role": "kv_both"},
    "lmcache": {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"},
    "lmcache-mp": {"kv_connector": "LMCacheMPConnector", "kv_role": "kv_both",
                   "kv_connector_module_path": "lmcache.integration.vllm.lmcache_mp_connector",
                   "kv_connector_extra_config": {"lmcache.mp.host": "tcp://localhost", "lmcache.mp.port": 8750}},
    "kvbm": {"kv_connector": "DynamoConnector", "kv_role": "kv_both",
             "kv_connector_module_path": "kvbm.vllm_integration.connector"},
    "moriio": {"kv_connector": "MoRIIOConnector", "kv_role": "kv_both"},
}
# flags the layout owns: a recipe's own values would contradict it
MANAGED = frozenset({
    "host", "port", "model", "data-parallel-address", "data-parallel-start-rank", "data-parallel-size-local",
    "data-parallel-hybrid-lb", "headless", "master-addr", "nnodes", "node-rank",
})
MODE_FLAG = {"prefill": "prefill", "decode": "decode"}
# srtctl's VLLM_PORT_STRIDE: each process's private range for vLLM's get_open_port() scans
SCAN_PORTS = 50
# srtctl's defaults under roles.<role>.kv_events (backends/base.py role_kv_events)
KV_EVENTS_DEFAULTS = {"publisher": "zmq", "topic": "kv-events", "enable_kv_cache_events": True}


# srtctl: every engine of a multi-node failover worker is its own torch.distributed job
MASTER_PORT_BASE, MASTER_PORT_STRIDE = 29500, 100


class VLLMBackend(VLLMEngine, Backend):
    """vLLM engine (``engine.type: vllm``)."""

    # vLLM retitles its children VLLM::<name>; both launch styles' parents too
    process_exporter_groups: ClassVar[tuple[ProcessGroup, ...]] = (
        ProcessGroup("vllm_engine_core", cmdline=(r"^VLLM::EngineCore",)),
        ProcessGroup("vllm_worker", cmdline=(r"^VLLM::Worker",)),
        ProcessGroup("vllm_api_server", cmdline=(r"^VLLM::APIServer",)),
        ProcessGroup("vllm_dp_coordinator", cmdline=(r"^VLLM::DPCoordinator",)),
        ProcessGroup("vllm_serve", cmdline=(r"(^|[ /])vllm serve( |$)",)),
        ProcessGroup("dynamo_vllm", cmdline=(r"dynamo\.vllm",)),
    )
    nvtx_environment: ClassVar[dict[str, str]] = {"VLLM_NVTX_SCOPES_FOR_PROFILING": "1"}

    carried_knobs: ClassVar[dict[str, str]] = {
        # allow_prefill_decode_colocation is acted on: one node when every worker fits (Recipe.role_layouts)
        "allow_prefill_decode_colocation_across_nodes":
            "not read; prefill and decode that do not fit on one node keep a node set per role (srtctl packs them "
            "contiguously over the fewest nodes)",
        "dp_launch_mode": "per_gpu (deprecated in srtctl) is not run: data-parallel workers launch one process per node",
    }

    def should_set_visible_devices(self) -> bool:
        # set_cuda_visible_devices: the older spelling, still in srt-slurm's examples; failover pins the
        # mask so that "device k" is the same GPU for the gms servers and every engine (no --device-ids)
        return self.set_visible_devices or bool(self.set_cuda_visible_devices) or self.failover is not None

    @property
    def _dynamo(self) -> bool:
        return self.recipe.frontend.type == "dynamo"

    def _parallel(self, mode: Mode) -> tuple[int, int]:
        """(replica GPUs = TP x PP, data-parallel size) from the role's args."""
        args = self.get_config_for_mode(mode)
        sizes = []
        for names in (("tensor-parallel-size", "tp"), ("pipeline-parallel-size", "pp"), ("data-parallel-size", "dp")):
            v = get_key(args, *names) or 1
            if isinstance(v, bool) or not str(v).isdigit() or int(v) < 1:
                from reconciler.recipe.topology import TopologyError

                raise TopologyError(f"roles.{mode}.args.{names[0]}", f"expected a positive whole number, found {v!r}")
            sizes.append(int(v))
        tp, pp, dp = sizes
        return tp * pp, dp

    def _hybrid_dp(self, ep: Endpoint) -> bool:
        """Per-node data parallel (each node its own API server): Dynamo, or vllm-router."""
        replica, dp = self._parallel(ep.mode)
        return dp > 1 and replica <= len(ep.gpus) and (self._dynamo or self.recipe.frontend.type == "vllm-router")

    def port_names(self, mode: Mode) -> tuple[str, ...]:
        return ("http", "system", "kv_events") if self._dynamo else ("http",)

    def leader_port_names(self, mode: Mode) -> tuple[str, ...]:
        return ("dp_rpc",)

    def endpoint_port_names(self, ep: Endpoint) -> tuple[str, ...]:
        # srtctl allocates the DP RPC port for single-node DP too: two DP workers on one node
        # would otherwise both take vLLM's default
        return ("dp_rpc",) if self._parallel(ep.mode)[1] > 1 and len(ep.nodes) == 1 else ()

    def port_blocks(self, ep: Endpoint) -> dict[str, int]:
        replica, dp = self._parallel(ep.mode)
        blocks = {"nixl": dp}
        # MoRI-IO's TP children share VLLM_PORT: srtctl gives it none. Nor does a worker spanning
        # nodes: srtctl unsets VLLM_PORT on every rank there (its ranks race for the same base;
        # cli/mixins/worker_stage.py start_worker, env_to_unset = ["VLLM_PORT"] if multi-node)
        moriio = self.connector_for_mode(ep.mode, dict(self.get_config_for_mode(ep.mode))) == json.dumps(CONNECTORS["moriio"])
        if not moriio and len(ep.nodes) == 1:
            blocks["vllm_scan"] = SCAN_PORTS
        if self._dynamo:
            blocks["kv_events"] = max(1, len(ep.gpus) // replica) if dp > 1 else 1
        return blocks

    def get_served_model_name(self, default: str) -> str:
        return self.served_model_name or super().get_served_model_name(default)

    def connector_for_mode(self, mode: Mode, args: dict) -> str | None:
        raw = pop_keys(args, "connector")
        name = raw if raw is not None else self.connector
        if mode == "agg" and raw is None and not self._dynamo:
            return None  # srtctl: behind Dynamo agg workers get the default connector too
        if name is None or name == "none":
            return None
        if name in CONNECTORS:
            return json.dumps(CONNECTORS[name])
        return str(name)  # a raw JSON KVTransferConfig

    def build_worker_command(self, process: Process, runtime: Runtime) -> list[str]:
        args = self.get_config_for_mode(process.mode)
        recipe_rpc = pop_keys(args, "data-parallel-rpc-port")
        pop_keys(args, *MANAGED)
        kv = None if get_key(args, "kv-transfer-config") else self.connector_for_mode(process.mode, args)
        if self._dynamo:
            argv = [runtime.engine_python, "-m", "dynamo.vllm", "--model", runtime.model_path]
            if get_key(args, "served-model-name") is None:
                argv += ["--served-model-name", runtime.served_model_name]
            pop_keys(args, "disaggregation-mode", "is-prefill-worker", "is-decode-worker")  # the role decides
            if process.mode in MODE_FLAG:
                argv += ["--disaggregation-mode", MODE_FLAG[process.mode]]
        else:
            argv = [self.vllm_serve_binary, "serve", runtime.model_path]
            if process.node_rank == 0 or self._hybrid_dp(process.endpoint):  # hybrid LB: every node serves
                argv += ["--host", "0.0.0.0", "--port", str(process.ports["http"])]
            # srtctl's direct worker: the served name and the connector are role args, sorted with them
            if get_key(args, "served-model-name") is None:
                args["served-model-name"] = runtime.served_model_name
            if kv:
                args["kv-transfer-config"], kv = kv, None
        if kv:
            argv += ["--kv-transfer-config", kv]
        argv += self._failover_flags(process, args)
        argv += self._layout(process, recipe_rpc)
        if not self.should_set_visible_devices() and process.gpus:
            # srtctl's default: the engine picks its GPUs, no environment mask
            argv += ["--device-ids", ",".join(map(str, sorted(process.gpus)))]
        if self._dynamo and get_key(args, "request-plane") is None:
            argv += ["--request-plane", self.recipe.dynamo.request_plane]
        if self._dynamo:
            argv += self._dynamo_extras(process, runtime, args)
        return argv + cli_args(dict(sorted(args.items())))  # srtctl passes role args sorted by key

    def _dynamo_extras(self, process: Process, runtime: Runtime, args: dict) -> list[str]:
        """srtctl's config dump (one file per process here: srtctl's per-node name is shared by the
        workers of a node) and the role's KV-event publisher on the process's own port."""
        out = []
        if get_key(args, "dump-config-to") is None:
            # a failover worker's engines are processes of one worker: each dumps its own file
            engine = f"_e{process.endpoint.engine}" if process.endpoint.engine else ""
            out += ["--dump-config-to", f"{runtime.config_dir}/{process.node}_{process.mode}_w{process.index}"
                                        f"{engine}_r{process.node_rank}_config.json"]
        kv = self.recipe.roles[process.mode].kv_events
        if kv and get_key(args, "kv-events-config") is None:
            cfg = {**KV_EVENTS_DEFAULTS, **(kv if isinstance(kv, dict) else {}),
                   "endpoint": f"tcp://*:{process.ports['kv_events']}"}
            out += ["--kv-events-config", json.dumps(cfg)]
        return out

    def _failover_flags(self, process: Process, args: dict) -> list[str]:
        """srtctl's: every engine loads through GMS and parks until it holds the worker's lock;
        a multi-node worker's engines each get their own torch.distributed store port."""
        if self.failover is None:
            return []
        pop_keys(args, "load-format", "gms-shadow-mode")  # gms or unset: validated (failover.check)
        master = pop_keys(args, "master-port")
        flags = ["--load-format", "gms", "--gms-shadow-mode"]
        if len(process.hosts) > 1:
            base = int(master) if master is not None else MASTER_PORT_BASE
            flags += ["--master-port", str(base + MASTER_PORT_STRIDE * process.endpoint.engine)]
        return flags

    def allocate_endpoints(self):
        for mode in self._own_modes():
            self._parallel(mode)  # a parallel size that is not a number is the recipe's error, at load
        return super().allocate_endpoints()

    def _layout(self, process: Process, recipe_rpc: object) -> list[str]:
        ep = process.endpoint
        replica, dp = self._parallel(process.mode)
        rpc = process.ports.get("dp_rpc")
        if self._hybrid_dp(ep):
            local = max(1, len(ep.gpus) // replica)
            return ["--data-parallel-size-local", str(local), "--data-parallel-start-rank", str(process.node_rank * local),
                    "--data-parallel-address", process.leader, "--data-parallel-rpc-port", str(rpc),
                    "--data-parallel-hybrid-lb"]
        out: list[str] = []
        if len(process.hosts) > 1:
            out += ["--master-addr", process.leader, "--nnodes", str(len(process.hosts)),
                    "--node-rank", str(process.node_rank)]
            if dp > 1:
                out += ["--data-parallel-address", process.leader, "--data-parallel-rpc-port", str(rpc)]
            if process.node_rank > 0:
                out.append("--headless")
        elif dp > 1:
            # one node, vLLM's own DP: the allocated RPC port, or the recipe's
            out += ["--data-parallel-rpc-port", str(rpc if rpc is not None else recipe_rpc)]
        return out

    def get_process_environment(self, process: Process) -> dict[str, str]:
        env = {"VLLM_NIXL_SIDE_CHANNEL_PORT": str(process.ports["nixl"]), "VLLM_NIXL_SIDE_CHANNEL_HOST": process.node}
        if "vllm_scan" in process.ports:
            env["VLLM_PORT"] = str(process.ports["vllm_scan"])
        if self._dynamo:
            env |= {"DYN_SYSTEM_ENABLED": "true", "DYN_SYSTEM_PORT": str(process.ports["system"]),
                    "DYN_VLLM_KV_EVENT_PORT": str(process.ports["kv_events"])}
        return env

    def env_unset(self, process: Process) -> tuple[str, ...]:
        # srtctl cli/mixins/worker_stage.py start_worker: `env_to_unset = ["VLLM_PORT"] if
        # backend.type == "vllm" and len(endpoint_nodes) > 1` -- vLLM's ranks of a multi-node
        # worker race for one VLLM_PORT base; they take ephemeral ports instead
        return ("VLLM_PORT",) if len(process.hosts) > 1 else ()

    def health_probe(self, mode: Mode) -> HealthProbe:
        return HealthProbe("system", "/health", "dynamo") if self._dynamo else HealthProbe("http", "/health")

    def fatal_log_patterns(self, mode: Mode) -> tuple[str, ...]:
        return (r"EngineDeadError", r"Engine core proc .* died unexpectedly")


# vLLM's own log lines that mark the phases of a start (vLLM 0.32's wording): the prefix of every
# line it writes, the weights loaded, and the engine's profile + KV cache + warm-up (torch.compile)
_STAMP = re.compile(r"^\((\w+) pid=\d+\) \w+ (\d\d-\d\d \d\d:\d\d:\d\d) ")
_LOADED = re.compile(r"Loading weights took ([\d.]+) seconds")
_WARMED = re.compile(r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+) s")


def start_phases(log_text: str, year: int) -> dict[str, float]:
    """What a vLLM life's log says of its start: ``first_line`` (epoch seconds of its first
    timestamped line, vLLM's own clock, whole seconds: the imports end there), ``load`` and
    ``warmup`` (seconds, vLLM's own figures). A phase the log does not show yet is absent.
    ``year``: vLLM's stamps carry none."""
    out: dict[str, float] = {}
    for line in log_text.splitlines():
        if "first_line" not in out and (m := _STAMP.match(line)):
            out["first_line"] = datetime.strptime(f"{year}-{m.group(2)}", "%Y-%m-%d %H:%M:%S").timestamp()
        if "load" not in out and (m := _LOADED.search(line)):
            out["load"] = float(m.group(1))
        if "warmup" not in out and (m := _WARMED.search(line)):
            out["warmup"] = float(m.group(1))
    return out
