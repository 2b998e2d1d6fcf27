"""TileRT (``engine.type: tilert``): a decode-only engine, paired with a vLLM prefill role.

As srtctl: a recipe sets ``roles.prefill.engine: vllm`` (with the TileRTConnector in its
``kv-transfer-config``) and ``roles.decode.engine: tilert``, behind ``frontend.type:
tilert-router``. Every decode worker is one process on one node running ``python -m
tilert.pd_vllm.decode_server --engine tilert --http-port P --ctrl-port C`` and then the
decode role's ``args`` (srtctl's static spelling: insertion order, ``_`` read as ``-``, a list
repeats the flag); the control port is allocator-owned (srtctl: the per-process NIXL slot).
Readiness: GET /health. Needs a TileRT GPU image: rendered and tested here, never run.
"""

from __future__ import annotations

from typing import ClassVar


from reconciler.backends.base import Backend, HealthProbe, ProcessGroup, Runtime, _norm, static_args
from reconciler.recipe.engines import TileRTEngine
from reconciler.recipe.topology import Endpoint, Mode, Process, TopologyError

OWNED = ("engine", "http-port", "ctrl-port")


class TileRTBackend(TileRTEngine, Backend):
    """TileRT decode engine (``engine.type: tilert``)."""

    process_exporter_groups: ClassVar[tuple[ProcessGroup, ...]] = (
        ProcessGroup("tilert_decode", cmdline=(r"tilert\.pd_vllm\.decode_server",)),
    )

    def allocate_endpoints(self) -> list[Endpoint]:
        for mode in self._own_modes():
            args = self.recipe.roles.get(mode).args
            owned = sorted(k for k in args if _norm(k) in OWNED)
            if owned:
                raise TopologyError(f"roles.{mode}.args.{owned[0]}", "set by the reconciler for TileRT (engine, "
                                    "http-port, ctrl-port): remove it")
        endpoints = super().allocate_endpoints()
        for ep in endpoints:
            if ep.mode in self._own_modes() and (ep.mode != "decode" or len(ep.nodes) > 1):
                raise TopologyError(f"roles.{ep.mode}", "TileRT supports single-node decode workers only (the "
                                    "prefill role runs its own engine: roles.prefill.engine: vllm)")
        return endpoints

    def port_names(self, mode: Mode) -> tuple[str, ...]:
        return ("http", "ctrl")

    def get_served_model_name(self, default: str) -> str:
        return self.served_model_name or default

    def build_worker_command(self, process: Process, runtime: Runtime) -> list[str]:
        return [runtime.engine_python, "-m", "tilert.pd_vllm.decode_server", "--engine", "tilert",
                "--http-port", str(process.ports["http"]), "--ctrl-port", str(process.ports["ctrl"]),
                *static_args(self.get_config_for_mode(process.mode))]

    def health_probe(self, mode: Mode) -> HealthProbe:
        return HealthProbe("http", "/health")

    @property
    def prometheus_metrics_path(self) -> str | None:  # type: ignore[override]
        return None  # a TileRT decode server has no /metrics (srtctl scrapes the prefill only)
