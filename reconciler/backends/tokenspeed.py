"""TokenSpeed (``engine.type: tokenspeed``): one step per process; prefill / decode / agg.

Behind the Dynamo frontend every process runs ``python3 -m dynamo.tokenspeed``; behind
a router that is handed workers directly (SMG: ``sglang-router`` / ``sgl-router``, or
``none``) it runs TokenSpeed's gRPC engine ``python3 -m smg_grpc_servicer.tokenspeed``:
gRPC mode is then always on, its port is the routable one, routers get ``grpc://``
URLs and readiness is its port accepting. As srtctl: ``--model``, ``--served-model-name``,
``--host`` (the process's node), ``--port`` (its own), ``--dist-init-addr
leader:<rendezvous>`` with ``--nnodes``/``--node-rank`` always, ``--disaggregation-mode``
and the prefill bootstrap port; the role's ``args`` in SGLang's spelling after them. Each
endpoint holds a rendezvous block of 6 + its GPU count ports on its leader (the base,
five above it, a scheduler port per attention-DP rank). Disaggregated processes get
``TOKENSPEED_SKIP_GRPC_WARMUP=1``: the gRPC warmup sends a request without a KV
bootstrap room, which a disaggregated engine cannot serve.
"""

from __future__ import annotations

from typing import ClassVar


from reconciler.backends.base import Backend, HealthProbe, ProcessGroup, Runtime, cli_args, pop_keys
from reconciler.recipe.engines import TokenSpeedEngine
from reconciler.recipe.topology import Endpoint, Mode, Process

OWNED = ("model", "model-path", "served-model-name", "host", "port", "dist-init-addr", "nnodes", "node-rank",
         "disaggregation-mode", "disaggregation-bootstrap-port")
DIRECT_FRONTENDS = ("sglang-router", "sgl-router", "none")


class TokenSpeedBackend(TokenSpeedEngine, Backend):
    """TokenSpeed engine (``engine.type: tokenspeed``)."""

    process_exporter_groups: ClassVar[tuple[ProcessGroup, ...]] = (
        ProcessGroup("tokenspeed_grpc", cmdline=(r"smg_grpc_servicer\.tokenspeed",)),
        ProcessGroup("dynamo_tokenspeed", cmdline=(r"dynamo\.tokenspeed",)),
    )

    @property
    def _dynamo(self) -> bool:
        return self.recipe.frontend.type == "dynamo"

    def allocate_endpoints(self) -> list[Endpoint]:
        from reconciler.recipe.topology import TopologyError

        fe = self.recipe.frontend.type
        if not self._dynamo and fe not in DIRECT_FRONTENDS:
            raise TopologyError("frontend.type", f"TokenSpeed workers serve gRPC off Dynamo: use dynamo, "
                                                 f"{', '.join(DIRECT_FRONTENDS)} (found {fe!r})")
        return super().allocate_endpoints()

    def port_names(self, mode: Mode) -> tuple[str, ...]:
        return ("tokenspeed", "system") if self._dynamo else ("tokenspeed",)

    def endpoint_port_names(self, ep: Endpoint) -> tuple[str, ...]:
        return ("bootstrap",) if ep.mode == "prefill" else ()

    def endpoint_port_blocks(self, ep: Endpoint) -> dict[str, int]:
        return {"dist_init": 6 + ep.total_gpus}

    def is_grpc_mode(self) -> bool:
        return not self._dynamo

    def get_served_model_name(self, default: str) -> str:
        for mode in ("prefill", "agg", "decode"):  # srtctl's order for TokenSpeed
            name = self.get_config_for_mode(mode).get("served-model-name") or \
                self.get_config_for_mode(mode).get("served_model_name")
            if name:
                return str(name)
        return default

    def build_worker_command(self, process: Process, runtime: Runtime) -> list[str]:
        args = self.get_config_for_mode(process.mode)
        pop_keys(args, *OWNED)
        module = "dynamo.tokenspeed" if self._dynamo else "smg_grpc_servicer.tokenspeed"
        argv = [runtime.engine_python, "-m", module, "--model", runtime.model_path,
                "--served-model-name", self.get_served_model_name(runtime.served_model_name),
                "--host", process.node, "--port", str(process.ports["tokenspeed"]),
                "--dist-init-addr", f"{process.leader}:{process.ports['dist_init']}",
                "--nnodes", str(len(process.hosts)), "--node-rank", str(process.node_rank)]
        if process.mode != "agg":
            argv += ["--disaggregation-mode", process.mode]
        if process.mode == "prefill" and "bootstrap" in process.ports:
            argv += ["--disaggregation-bootstrap-port", str(process.ports["bootstrap"])]
        return argv + cli_args(args)

    def get_process_environment(self, process: Process) -> dict[str, str]:
        env = {"TOKENSPEED_SKIP_GRPC_WARMUP": "1"} if process.mode != "agg" else {}
        if self._dynamo:
            env |= {"DYN_SYSTEM_ENABLED": "true", "DYN_SYSTEM_PORT": str(process.ports["system"])}
        return env

    def health_probe(self, mode: Mode) -> HealthProbe:
        return HealthProbe("system", "/health", "dynamo") if self._dynamo else HealthProbe("tokenspeed", "", "tcp")
