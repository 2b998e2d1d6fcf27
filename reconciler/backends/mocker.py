"""Mocker: a GPU-less engine for tests and demos.

Behind the Dynamo frontend it renders ``python3 -m dynamo.mocker`` like srtctl;
behind every other frontend it runs the project's own engine,
``python -m reconciler.mocker``, with the same knobs. A role's ``args`` override
the engine-wide knobs for that role (``num-gpu-blocks-override: 8192``).

``failover`` (not an srtctl mocker knob) runs the shadow-engine layout of a vLLM
failover recipe with ``dynamo.mocker`` as every engine: the same gms service, engine
units, environment, GPU pinning and relaunches, GPU-less. The mocker ignores GMS and
the lock, so its shadows register with the frontend too (docs/backends.md).
"""

from __future__ import annotations

from typing import Any, ClassVar


from reconciler.backends.base import Backend, HealthProbe, ProcessGroup, Runtime, cli_args, get_key
from reconciler.recipe.engines import MockerEngine
from reconciler.recipe.topology import Endpoint, Mode, Process

# knob -> flag of reconciler.mocker (None: accepted, not simulated)
OWN_FLAGS: dict[str, str | None] = {
    "speedup_ratio": "speedup-ratio",
    "decode_speedup_ratio": "decode-speedup-ratio",
    "num_gpu_blocks_override": "num-gpu-blocks",
    "max_num_seqs": "max-num-seqs",
    "max_num_batched_tokens": "max-num-batched-tokens",
    "block_size": "block-size",
    "enable_prefix_caching": "enable-prefix-caching",
    "startup_time": "startup-time",
    "engine_type": None,
    "data_parallel_size": None,
    "num_workers": None,
    "kv_transfer_bandwidth": None,
    "kv_cache_dtype": None,
    "enable_chunked_prefill": None,
    "preemption_mode": None,
}
KNOBS = tuple(OWN_FLAGS)
# srtctl's dynamo.mocker argv: these always, the rest only when they differ from the default
ALWAYS = ("engine_type", "speedup_ratio", "data_parallel_size", "num_gpu_blocks_override", "max_num_seqs",
          "max_num_batched_tokens")


class MockerBackend(MockerEngine, Backend):
    """GPU-less mock engine (``engine.type: mocker``)."""

    process_exporter_groups: ClassVar[tuple[ProcessGroup, ...]] = (
        ProcessGroup("dynamo_mocker", cmdline=(r"dynamo\.mocker",)),
        ProcessGroup("reconciler_mocker", cmdline=(r"reconciler\.mocker",)),
    )

    @property
    def _dynamo(self) -> bool:
        return self.recipe.frontend.type == "dynamo"

    def needs_gpus(self) -> bool:
        return False  # a surge life may run on the old life's (fake) GPUs

    def port_names(self, mode: Mode) -> tuple[str, ...]:
        return ("system",) if self._dynamo else ("http",)

    def endpoint_port_names(self, ep: Endpoint) -> tuple[str, ...]:
        return ("bootstrap",) if self._dynamo and ep.mode == "prefill" else ()

    def uses_container(self) -> bool:
        return self._dynamo  # our own mocker runs from the reconciler's Python

    def get_served_model_name(self, default: str) -> str:
        if self.served_model_name:
            return self.served_model_name
        # a role's args.model-name is the mocker's own spelling of the served name
        for mode in ("agg", "prefill", "decode"):
            given = get_key(self.get_config_for_mode(mode), "model-name")  # type: ignore[arg-type]
            if given:
                return str(given)
        return super().get_served_model_name(default)

    def _settings(self, mode: Mode) -> dict[str, Any]:
        """Engine knobs overlaid with the role's args (both spellings accepted)."""
        merged: dict[str, Any] = {k: getattr(self, k) for k in KNOBS}
        extra: dict[str, Any] = {}
        for key, value in self.get_config_for_mode(mode).items():
            k = key.lstrip("-").replace("-", "_")
            if k == "num_gpu_blocks":
                k = "num_gpu_blocks_override"
            if k in merged:
                merged[k] = value
            elif k not in ("served_model_name", "model_name", "model_path", "port", "host", "mode"):
                extra[key] = value
        return merged | {"__extra__": extra}

    def _role(self, mode: Mode, served: str) -> tuple[dict[str, Any], dict[str, Any], str]:
        """The role's knobs, its other args and the name it serves under: the same for every worker
        of the role, so worked out once per binding (``Backend.memo``), not once per worker. Read only."""
        key = ("role", mode, served)
        if key not in self.memo:
            s = self._settings(mode)
            extra = s.pop("__extra__")
            given = get_key(self.get_config_for_mode(mode), "model-name", "served-model-name")
            self.memo[key] = (s, extra, str(given) if given else self.get_served_model_name(served))
        return self.memo[key]

    def build_worker_command(self, process: Process, runtime: Runtime) -> list[str]:
        s, extra, name = self._role(process.mode, runtime.served_model_name)
        if self._dynamo:
            return self._dynamo_argv(process, runtime, s, extra)
        head = [runtime.python, "-m", "reconciler.mocker", "--host", "0.0.0.0", "--port", str(process.ports["http"])]
        # all but the port is the role's: spelled once per binding and runtime, not per worker
        key = ("own-argv", process.mode, runtime)
        if key not in self.memo:
            argv = ["--mode", process.mode, "--model-name", name, "--model-path", runtime.model_path]
            for knob, flag in OWN_FLAGS.items():
                v = s[knob]
                if flag is None or v is None:
                    continue
                if isinstance(v, bool):
                    argv.append(f"--{flag}" if v else f"--no-{flag}")
                else:
                    argv += [f"--{flag}", str(v)]
            self.memo[key] = tuple(argv + cli_args(extra))
        return head + list(self.memo[key])

    def _dynamo_argv(self, process: Process, runtime: Runtime, s: dict[str, Any], extra: dict[str, Any]) -> list[str]:
        argv = [runtime.engine_python, "-m", "dynamo.mocker", "--model-path", runtime.model_path]
        given = get_key(self.get_config_for_mode(process.mode), "model-name")
        name = str(given) if given else self.get_served_model_name(runtime.served_model_name)
        # srtctl passes no name: Dynamo then serves the model path it was given, which is the
        # served name for a Hugging Face id; a local directory's path (or /model in a container)
        # is not, and the router, the canary and clients must all ask for one name
        if name != runtime.model_path:
            argv += ["--model-name", name]
        if process.mode != "agg":
            argv += ["--disaggregation-mode", process.mode]
            if process.mode == "prefill":
                argv += ["--bootstrap-ports", str(process.ports["bootstrap"])]
        defaults = self.__dataclass_fields__  # type: ignore[attr-defined]
        for knob in ALWAYS + tuple(k for k in KNOBS if k not in ALWAYS):
            v = s[knob]
            if knob not in ALWAYS and (v is None or v == defaults[knob].default):
                continue
            if knob == "num_workers" and v == 1:
                continue
            flag = knob.replace("_", "-")
            if isinstance(v, bool):
                argv.append(f"--{flag}" if v else f"--no-{flag}")
            else:
                argv += [f"--{flag}", str(v)]
        return argv + cli_args(dict(sorted(extra.items())))

    def get_process_environment(self, process: Process) -> dict[str, str]:
        env = {"PYTHONUNBUFFERED": "1"}
        if self._dynamo:
            env |= {"DYN_SYSTEM_ENABLED": "true", "DYN_SYSTEM_PORT": str(process.ports["system"])}
        return env

    def health_probe(self, mode: Mode) -> HealthProbe:
        # behind Dynamo the worker's /health is Dynamo's system server
        return HealthProbe("system", "/health", "dynamo") if self._dynamo else HealthProbe("http", "/health")

    def fatal_log_patterns(self, mode: Mode) -> tuple[str, ...]:
        return (r"^FATAL ",)
