"""SGLang: one srun step per process; prefill / decode / agg.

``python3 -m sglang.launch_server`` behind every frontend except Dynamo, where
``python3 -m dynamo.sglang`` registers the worker instead. Disaggregated workers get
``--disaggregation-mode`` (and the prefill endpoint one bootstrap port, shared by its
ranks); a multi-node worker gets ``--dist-init-addr leader:port --nnodes N --node-rank r``.
As srtctl: every process its own ``--nccl-port`` (co-located servers would race for
one), ``--enable-metrics`` (what makes /metrics exist), and no crash-dump waits on stop;
a role with ``kv_events`` publishes them on its own port (``--kv-events-config``), and
``dynamo.sglang`` dumps its config (``--dump-config-to``, one file per process).
"""

from __future__ import annotations

import json
from typing import ClassVar


from reconciler.backends.base import Backend, HealthProbe, ProcessGroup, Runtime, cli_args, get_key, pop_keys
from reconciler.recipe.engines import SGLangEngine
from reconciler.recipe.topology import Endpoint, Mode, Process

MANAGED = frozenset({"model-path", "host", "port", "dist-init-addr", "nnodes", "node-rank",
                     "disaggregation-bootstrap-port", "nccl-port"})
# srtctl sets these unless the recipe does: SGLang otherwise waits ~60 s for a core/py-spy dump on SIGTERM
NO_CRASH_DUMPS = {"SGLANG_CUDA_COREDUMP_BEFORE_CRASH": "0", "SGLANG_PYSPY_DUMP_BEFORE_CRASH": "0"}


class SGLangBackend(SGLangEngine, Backend):
    """SGLang engine (``engine.type: sglang``)."""

    # SGLang retitles its children sglang::<name>
    process_exporter_groups: ClassVar[tuple[ProcessGroup, ...]] = (
        ProcessGroup("sglang_scheduler", cmdline=(r"^sglang::scheduler",)),
        ProcessGroup("sglang_dp_controller", cmdline=(r"^sglang::data_parallel_controller",)),
        ProcessGroup("sglang_detokenizer", cmdline=(r"^sglang::detokenizer",)),
        ProcessGroup("sglang_server", cmdline=(r"sglang\.launch_server",)),
        ProcessGroup("dynamo_sglang", cmdline=(r"dynamo\.sglang",)),
    )

    carried_knobs: ClassVar[dict[str, str]] = {
        "gpu_type": "srtctl does not read it either; resources.gpu_type is the GPU type",
    }

    def port_names(self, mode: Mode) -> tuple[str, ...]:
        names = ("http", "nccl", "system") if self._dynamo else ("http", "nccl")
        return names + (("kv_events",) if self._kv_events(mode) else ())

    def _kv_events(self, mode: Mode) -> dict | None:
        """srtctl's --kv-events-config for a role with kv_events: {publisher: zmq, topic: kv-events} under its own."""
        role = self.recipe.roles.get(mode)
        kv = role.kv_events if role is not None else None
        if not kv:
            return None
        return {"publisher": "zmq", "topic": "kv-events", **(kv if isinstance(kv, dict) else {})}

    def endpoint_port_names(self, ep: Endpoint) -> tuple[str, ...]:
        return ("bootstrap",) if ep.mode == "prefill" else ()

    def leader_port_names(self, mode: Mode) -> tuple[str, ...]:
        return ("dist_init",)

    @property
    def _dynamo(self) -> bool:
        return self.recipe.frontend.type == "dynamo"

    def build_worker_command(self, process: Process, runtime: Runtime) -> list[str]:
        args = self.get_config_for_mode(process.mode)
        # srtctl pops only model-path, served-model-name, nccl-port and grpc-port (backends/sglang.py
        # build_worker_command): a recipe's --disaggregation-bootstrap-port reaches a decode worker
        # as written. A prefill endpoint's is ours: the router is told it, and two prefill servers
        # on one node never share one
        pop_keys(args, *(MANAGED if process.mode == "prefill" else MANAGED - {"disaggregation-bootstrap-port"}))
        mode = pop_keys(args, "disaggregation-mode") or (process.mode if process.mode != "agg" else None)
        module = "dynamo.sglang" if self._dynamo else "sglang.launch_server"
        # srtctl: the served name right after the model, never among the sorted role args
        name = pop_keys(args, "served-model-name") or runtime.served_model_name
        argv = [runtime.engine_python, "-m", module, "--model-path", runtime.model_path, "--served-model-name", str(name)]
        # srtctl: only the leader serves HTTP; the other ranks get `--port 0` (core/topology.py
        # endpoints_to_processes: `http_port=... if is_leader else 0`, passed as `--port`)
        port = process.ports["http"] if process.node_rank == 0 else 0
        argv += ["--host", "0.0.0.0", "--port", str(port), "--nccl-port", str(process.ports["nccl"])]
        if get_key(args, "enable-metrics") is None:
            argv.append("--enable-metrics")
        if mode in ("prefill", "decode"):
            argv += ["--disaggregation-mode", mode]
            if not self._dynamo and get_key(args, "skip-server-warmup") is None:
                # srtctl: SGLang's synthetic warmup can hold a disaggregated server's readiness for minutes
                argv.append("--skip-server-warmup")
            if mode == "prefill" and "bootstrap" in process.ports:
                argv += ["--disaggregation-bootstrap-port", str(process.ports["bootstrap"])]
        if len(process.hosts) > 1:
            argv += [
                "--dist-init-addr", f"{process.leader}:{process.ports['dist_init']}",
                "--nnodes", str(len(process.hosts)),
                "--node-rank", str(process.node_rank),
            ]
        if self._dynamo and get_key(args, "dump-config-to") is None:
            argv += ["--dump-config-to", f"{runtime.config_dir}/{process.node}_{process.mode}_w{process.index}"
                                         f"_r{process.node_rank}_config.json"]
        kv = self._kv_events(process.mode)
        if kv and get_key(args, "kv-events-config") is None:
            argv += ["--kv-events-config", json.dumps({**kv, "endpoint": f"tcp://*:{process.ports['kv_events']}"})]
        if self._dynamo and get_key(args, "request-plane") is None:
            argv += ["--request-plane", self.recipe.dynamo.request_plane]
        return argv + cli_args(dict(sorted(args.items())))  # srtctl passes role args sorted by key

    def get_process_environment(self, process: Process) -> dict[str, str]:
        env = {k: v for k, v in NO_CRASH_DUMPS.items() if k not in self.get_environment_for_mode(process.mode)
               and k not in self.recipe.environment}
        if self.get_environment_for_mode(process.mode).get("SGLANG_CUDA_COREDUMP") in ("1", "true", "True"):
            env.pop("SGLANG_CUDA_COREDUMP_BEFORE_CRASH", None)
        if self._dynamo:
            env |= {"DYN_SYSTEM_ENABLED": "true", "DYN_SYSTEM_PORT": str(process.ports["system"])}
        return env

    def health_probe(self, mode: Mode) -> HealthProbe:
        return HealthProbe("system", "/health", "dynamo") if self._dynamo else HealthProbe("http", "/health")

    def fatal_log_patterns(self, mode: Mode) -> tuple[str, ...]:
        # the scheduler subprocess can die while the HTTP front process lives on
        return (r"Scheduler hit an exception", r"Received sigquit from a child process")
