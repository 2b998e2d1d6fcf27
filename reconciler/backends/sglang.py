"""SGLang: one srun step per process; prefill / decode / agg.

``python3 -m sglang.launch_server`` behind every frontend except Dynamo, where
``python3 -m dynamo.sglang`` registers the worker instead. Disaggregated workers get
``--disaggregation-mode`` (and the prefill a bootstrap port); a multi-node worker
gets ``--dist-init-addr leader:port --nnodes N --node-rank r``.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import ConfigDict
from pydantic.dataclasses import dataclass

from reconciler.backends.base import Backend, HealthProbe, Runtime, cli_args, pop_keys
from reconciler.topology import Mode, Process

MANAGED = frozenset({"model-path", "host", "port", "dist-init-addr", "nnodes", "node-rank", "disaggregation-bootstrap-port"})


@dataclass(frozen=True, config=ConfigDict(extra="forbid"))
class SGLangBackend(Backend):
    """SGLang engine (``engine.type: sglang``)."""

    type: Literal["sglang"] = "sglang"
    gpu_type: str | None = None

    carried_knobs: ClassVar[dict[str, str]] = {
        "gpu_type": "srtctl does not read it either; resources.gpu_type is the GPU type",
    }

    def port_names(self, mode: Mode) -> tuple[str, ...]:
        names = ["http"]
        if mode == "prefill":
            names.append("bootstrap")
        if self._dynamo:
            names.append("system")
        return tuple(names)

    def leader_port_names(self, mode: Mode) -> tuple[str, ...]:
        return ("dist_init",)

    @property
    def _dynamo(self) -> bool:
        return self.recipe.frontend.type == "dynamo"

    def build_worker_command(self, process: Process, runtime: Runtime) -> list[str]:
        args = self.get_config_for_mode(process.mode)
        pop_keys(args, *MANAGED)
        mode = pop_keys(args, "disaggregation-mode") or (process.mode if process.mode != "agg" else None)
        module = "dynamo.sglang" if self._dynamo else "sglang.launch_server"
        argv = ["python3", "-m", module, "--model-path", runtime.model_path, "--host", "0.0.0.0"]
        argv += ["--port", str(process.ports["http"])]
        if mode in ("prefill", "decode"):
            argv += ["--disaggregation-mode", mode]
            if mode == "prefill":
                argv += ["--disaggregation-bootstrap-port", str(process.ports["bootstrap"])]
        if len(process.hosts) > 1:
            argv += [
                "--dist-init-addr", f"{process.leader}:{process.ports['dist_init']}",
                "--nnodes", str(len(process.hosts)),
                "--node-rank", str(process.node_rank),
            ]
        return argv + cli_args(args)

    def get_process_environment(self, process: Process) -> dict[str, str]:
        if self._dynamo:
            return {"DYN_SYSTEM_ENABLED": "true", "DYN_SYSTEM_PORT": str(process.ports["system"])}
        return {}

    def health_probe(self, mode: Mode) -> HealthProbe:
        return HealthProbe("system" if self._dynamo else "http", "/health")

    def fatal_log_patterns(self, mode: Mode) -> tuple[str, ...]:
        # the scheduler subprocess can die while the HTTP front process lives on
        return (r"Scheduler hit an exception", r"Received sigquit from a child process")
