"""TRT-LLM: MPI-style launch, one srun step per endpoint across all its nodes.

As srtctl: the step runs one rank per GPU (``--mpi=pmix``, ``--ntasks-per-node`` the
endpoint's GPUs per node, oversubscribed, no CPU binding, a dead rank ends the step)
under ``trtllm-llmapi-launch``, which turns the MPI ranks into one engine. The role's
``args`` are the engine's YAML options, written to a file per role that the command
points at (``enable_iter_perf_stats: false`` unless set). Behind Dynamo the command is
``python3 -m dynamo.trtllm``; otherwise ``trtllm-serve``. On GB200/GB300/VR NVL72
prefill and decode workers get ``numactl -m 0,1`` unless ``numa_memory_bind`` says no;
``numa_cpu_bind`` wraps the command in srtctl's ``configs/numa_cpu_bind.sh`` (the cluster
config's ``srtctl_root``), with ``--bind-memory`` for ``numa_memory_bind: local``.
"""

from __future__ import annotations

import hashlib
from typing import Any, ClassVar

import yaml

from reconciler.backends.base import Ports, Backend, HealthProbe, ProcessGroup, Runtime, SrunConfig
from reconciler.recipe.engines import TRTLLMEngine
from reconciler.recipe.topology import Endpoint, Mode, Process


NUMA_GPUS = ("gb200", "gb300", "vrnvl72")  # srtctl: two NUMA nodes of memory per tray, case-sensitive
ENGINE_DEFAULTS = {"enable_iter_perf_stats": False}


class TRTLLMBackend(TRTLLMEngine, Backend):
    """TensorRT-LLM engine (``engine.type: trtllm``)."""

    # srtctl's: the launcher before the module it wraps, MPI engine ranks, the handler, trtllm-serve
    process_exporter_groups: ClassVar[tuple[ProcessGroup, ...]] = (
        ProcessGroup("trtllm_llmapi_launch", cmdline=(r"(^|[ /])trtllm-llmapi-launch( |$)",)),
        ProcessGroup("trtllm_engine", cmdline=(r"(^| )tensorrt_llm\.llmapi\.mgmn_worker_node( |$)",)),
        ProcessGroup("dynamo_trtllm", cmdline=(r"dynamo\.trtllm",)),
        ProcessGroup("trtllm_serve", cmdline=(r"trtllm-serve",)),
    )
    nvtx_environment: ClassVar[dict[str, str]] = {"TLLM_LLMAPI_ENABLE_NVTX": "1", "TLLM_PROFILE_LOG_RANKS": "all"}

    carried_knobs: ClassVar[dict[str, str]] = {
        "sequential_node_start": "workers of a node start together; starts are not batched",
    }

    def not_acted_on(self) -> dict[str, str]:
        out = super().not_acted_on()
        if self.numa_cpu_bind and not self.recipe.reconcile.configs_dir:
            why = ("srtctl wraps the worker in configs/numa_cpu_bind.sh from its source tree; the cluster config "
                   "sets no srtctl_root, so there is no such script here: not run")
            out["numa_cpu_bind"] = why
            if self.numa_memory_bind == "local":
                out["numa_memory_bind"] = why
        return out

    def _cpu_bind(self, argv: list[str]) -> list[str]:
        """srtctl's per-task CPU (and with numa_memory_bind: local, memory) binding wrapper, from its
        configs directory: /configs in a container, the directory itself on a host runtime."""
        configs = self.recipe.reconcile.configs_dir
        if not self.numa_cpu_bind or not configs:
            return argv
        where = configs if self.recipe.reconcile.container_runtime == "none" else "/configs"
        return ["bash", f"{where}/numa_cpu_bind.sh", *(["--bind-memory"] if self.numa_memory_bind == "local" else []),
                *argv]

    def reads_extra_args(self, mode: Mode) -> bool:
        return not self._dynamo  # srtctl appends them to trtllm-serve only

    @property
    def _dynamo(self) -> bool:
        return self.recipe.frontend.type == "dynamo"

    def get_srun_config(self) -> SrunConfig:
        return SrunConfig(per_process=False, mpi="pmix", ntasks_per_gpu=True)

    def port_names(self, mode: Mode) -> tuple[str, ...]:
        return ("http", "system", "master") if self._dynamo else ("http", "master")

    def srun_options(self, ep: Endpoint) -> dict[str, str]:
        return {"oversubscribe": "", "cpu-bind": "verbose,none", "ntasks-per-node": str(len(ep.gpus)),
                "kill-on-bad-exit": "1"}

    def _numactl(self, mode: Mode) -> list[str]:
        bind = self.numa_memory_bind
        gpu = self.recipe.resources.gpu_type
        if bind is True or (bind is None and gpu in NUMA_GPUS and mode in ("prefill", "decode")):
            return ["numactl", "-m", "0,1"]
        return []

    def endpoints_to_processes(
        self, endpoints: list[Endpoint], hostnames: list[str], ports: Ports, owner_prefix: str
    ) -> list[Process]:
        # one launch per endpoint: its ports live on the leader node
        out = []
        for ep in endpoints:
            hosts = tuple(hostnames[n] for n in ep.nodes)
            owner = f"{owner_prefix}{ep.life}"
            p = {name: ports.allocate(hosts[0], owner, name) for name in self.port_names(ep.mode)}
            out.append(Process(ep, hosts[0], 0, hosts[0], hosts, p))
        return out

    def process_ntasks(self, process: Process) -> int:
        return process.endpoint.total_gpus

    def get_served_model_name(self, default: str) -> str:
        return self.served_model_name or default

    def config_path(self, mode: Mode, runtime: Runtime) -> str:
        return f"{runtime.config_dir}/trtllm_{mode}.yaml"

    def config_files(self, mode: Mode, runtime: Runtime) -> dict[str, str]:
        cfg: dict[str, Any] = {**ENGINE_DEFAULTS, **self.get_config_for_mode(mode)}
        return {self.config_path(mode, runtime): yaml.safe_dump(cfg, sort_keys=True)}

    def build_worker_command(self, process: Process, runtime: Runtime) -> list[str]:
        cfg = self.config_path(process.mode, runtime)
        name = self.get_served_model_name(runtime.served_model_name)
        role = self.recipe.roles[process.mode]
        argv = self._numactl(process.mode) + ["trtllm-llmapi-launch"]
        if self._dynamo:
            argv += [runtime.engine_python, "-m", "dynamo.trtllm", "--model-path", runtime.model_path, "--served-model-name", name]
            if process.mode != "agg":
                argv += ["--disaggregation-mode", process.mode]
            argv += ["--extra-engine-args", cfg, "--request-plane", self.recipe.dynamo.request_plane]
            if self.publish_events_and_metrics:
                argv.append("--publish-events-and-metrics")
            elif self.publish_metrics:
                argv.append("--publish-metrics")
        else:
            argv += ["trtllm-serve", runtime.model_path, "--host", "0.0.0.0", "--port", str(process.ports["http"]),
                     "--config", cfg]
            if name != runtime.model_path:  # trtllm-serve serves its model argument unless told
                argv += ["--served_model_name", name]
            argv += list(role.extra_args)
        return self._cpu_bind(argv)

    def get_environment_for_mode(self, mode: Mode) -> dict[str, str]:
        env = super().get_environment_for_mode(mode)
        if self.numa_cpu_bind and self.recipe.reconcile.configs_dir:
            env["TLLM_NUMA_AWARE_WORKER_AFFINITY"] = "0"  # TRT-LLM's own pinning would fight the wrapper's mask
        return env

    def get_process_environment(self, process: Process) -> dict[str, str]:
        owner = f"{self.recipe.name}/{process.endpoint.name}"
        env = {
            "MASTER_ADDR": process.leader, "MASTER_PORT": str(process.ports["master"]),
            # srtctl draws a random name; a stable one keeps the spec (and so the worker) unchanged
            "TRTLLM_EPLB_SHM_NAME": "moe_shared_" + hashlib.sha256(owner.encode()).hexdigest()[:16],
        }
        if self._dynamo:
            env |= {"DYN_SYSTEM_ENABLED": "true", "DYN_SYSTEM_PORT": str(process.ports["system"])}
        return env

    def health_probe(self, mode: Mode) -> HealthProbe:
        return HealthProbe("system", "/health", "dynamo") if self._dynamo else HealthProbe("http", "/health")

    @property
    def prometheus_metrics_path(self) -> str:
        return "/metrics" if self._dynamo else "/prometheus/metrics"

    def fatal_log_patterns(self, mode: Mode) -> tuple[str, ...]:
        # the MPI launcher outlives a dead rank; these lines are the only sign
        return (r"Rank\d+ Task exit code: [1-9]\d*", r"Failed to initialize executor")
