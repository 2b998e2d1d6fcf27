"""The engines a recipe may name: ``engine.type`` -> the schema of its knobs.

This is all the recipe layer knows of an engine: its name and the knobs its ``engine:``
mapping may carry, validated with located errors (pydantic dataclasses, frozen). What an
engine *does* with them — ports, argv, environment, probes — is its backend
(``reconciler/backends/<name>.py``), which extends the schema class here and is found by
the same name in ``backends.registry``. Adding an engine: its knobs here plus one line in
``ENGINES``, its backend file plus one line in ``backends.registry.BACKENDS``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict
from pydantic.dataclasses import dataclass

from reconciler.recipe.failover import FailoverConfig
from reconciler.recipe.mooncake import MooncakeKVStoreConfig

_STRICT = ConfigDict(extra="forbid")


@dataclass(frozen=True, config=_STRICT)
class Engine:
    """Knobs every engine has."""

    type: str = "base"
    # the Mooncake KV store: runs the mooncake-master service, stamps its address on the workers
    mooncake_kv_store: MooncakeKVStoreConfig | None = None


@dataclass(frozen=True, config=_STRICT)
class SGLangEngine(Engine):
    """SGLang engine (``engine.type: sglang``)."""

    type: Literal["sglang"] = "sglang"
    gpu_type: str | None = None


@dataclass(frozen=True, config=_STRICT)
class VLLMEngine(Engine):
    """vLLM engine (``engine.type: vllm``)."""

    type: Literal["vllm"] = "vllm"
    set_visible_devices: bool = False
    set_cuda_visible_devices: bool | None = None
    connector: str | None = "nixl"
    failover: FailoverConfig | None = None  # shadow-engine recovery (backends/failover.py)
    served_model_name: str | None = None
    allow_prefill_decode_colocation: bool = False
    allow_prefill_decode_colocation_across_nodes: bool = False
    dp_launch_mode: Literal["per_gpu", "per_node"] = "per_node"
    vllm_serve_binary: str = "vllm"


@dataclass(frozen=True, config=_STRICT)
class TRTLLMEngine(Engine):
    """TensorRT-LLM engine (``engine.type: trtllm``)."""

    type: Literal["trtllm"] = "trtllm"
    served_model_name: str | None = None
    publish_metrics: bool = True
    publish_events_and_metrics: bool | None = None
    sequential_node_start: int = 0
    numa_memory_bind: bool | Literal["local"] | None = None
    numa_cpu_bind: bool = False

    def __post_init__(self) -> None:
        if self.numa_memory_bind == "local" and not self.numa_cpu_bind:
            raise ValueError("numa_memory_bind: local requires numa_cpu_bind: true (as in srtctl)")


@dataclass(frozen=True, config=_STRICT)
class MockerEngine(Engine):
    """GPU-less mock engine (``engine.type: mocker``)."""

    type: Literal["mocker"] = "mocker"
    engine_type: str = "vllm"
    speedup_ratio: float = 100.0
    decode_speedup_ratio: float = 1.0
    num_gpu_blocks_override: int = 16384
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    block_size: int | None = None
    data_parallel_size: int = 1
    num_workers: int = 1
    startup_time: float | None = None
    kv_transfer_bandwidth: float | None = None
    kv_cache_dtype: str | None = None
    enable_prefix_caching: bool = True
    failover: FailoverConfig | None = None  # the stand-in for vLLM's (backends/mocker.py)
    enable_chunked_prefill: bool = True
    preemption_mode: str | None = None
    served_model_name: str | None = None


@dataclass(frozen=True, config=_STRICT)
class TokenSpeedEngine(Engine):
    """TokenSpeed engine (``engine.type: tokenspeed``)."""

    type: Literal["tokenspeed"] = "tokenspeed"


@dataclass(frozen=True, config=_STRICT)
class AtomEngine(Engine):
    """ATOM engine on ROCm (``engine.type: atom``)."""

    type: Literal["atom"] = "atom"
    connector: Literal["mooncake"] = "mooncake"
    mooncake_protocol: Literal["rdma", "tcp"] | None = None  # unset: ATOM chooses


@dataclass(frozen=True, config=_STRICT)
class TileRTEngine(Engine):
    """TileRT decode engine (``engine.type: tilert``)."""

    type: Literal["tilert"] = "tilert"
    served_model_name: str | None = None


ENGINES: dict[str, type[Engine]] = {
    "sglang": SGLangEngine,
    "vllm": VLLMEngine,
    "trtllm": TRTLLMEngine,
    "mocker": MockerEngine,
    "tokenspeed": TokenSpeedEngine,
    "atom": AtomEngine,
    "tilert": TileRTEngine,
}


def engine_names() -> list[str]:
    return list(ENGINES)


def engine_list_text(conj: str = "and") -> str:
    """'sglang, vllm, trtllm and mocker' — for messages."""
    names = engine_names()
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} {conj} {names[-1]}"


def _check() -> None:
    # the key must be the class's own `type` literal, or the discriminator would never pick it
    for name, cls in ENGINES.items():
        default = cls.__dataclass_fields__["type"].default  # type: ignore[attr-defined]
        if default != name:
            raise RuntimeError(f"ENGINES[{name!r}] is {cls.__name__}, whose type is {default!r}")


_check()
