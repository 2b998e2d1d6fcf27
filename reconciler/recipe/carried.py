"""srtctl sections the reconciler accepts and carries but does not act on.

They are typed from srtctl's reference so that typos are still caught; `validate` and
`render` list them as "carried, not acted on". The schema the reconciler acts on is in
``reconciler.recipe.model``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from reconciler.recipe.types import Env, PlacementConfig, SrunOptions, Strict, _env_value

class DynamoSourceConfig(Strict):
    git: str | None = None
    rev: str | None = None
    sha: str | None = None
    patches: list[str] | None = None
    pypi: str | None = None
    wheel: str | None = None


class DynamoConfig(Strict):
    install: bool = True
    version: str | None = None
    hash: str | None = None
    wheel: str | None = None
    top_of_tree: bool = False
    source: DynamoSourceConfig | None = None
    request_plane: str = "tcp"
    event_plane: str | None = None
    sidecar: bool = False
    sidecar_port: int = 50051
    sidecar_binary: str | None = None
    sidecar_startup_timeout: int = 3600
    sidecar_context_length: int | None = None
    sidecar_args: list[str] = []

    @field_validator("version", "hash", "wheel", mode="before")
    @classmethod
    def _text(cls, v: Any) -> Any:
        return _env_value(v)


class SweepConfig(Strict):
    mode: Literal["zip", "grid"] = "zip"
    parameters: dict[str, list[Any]] = {}


class BenchmarkConfig(Strict):
    type: str = "manual"
    stream_output: bool = False
    isl: int | None = None
    osl: int | None = None
    concurrencies: list[int | str] | str | int | None = None
    req_rate: str | int | float | None = "inf"
    placement: PlacementConfig = PlacementConfig()
    colocate_with_frontend: bool = True
    sweep: SweepConfig | None = None
    num_examples: int | None = None
    max_tokens: int | None = None
    repeat: int | None = None
    num_threads: int | None = None
    max_context_length: int | None = None
    categories: list[str] | None = None
    num_shots: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    num_requests: int | None = None
    concurrency: int | None = None
    prefix_ratios: list[float] | str | None = None
    mooncake_workload: str | None = None
    ttft_threshold_ms: int | None = None
    itl_threshold_ms: int | None = None
    random_range_ratio: float | None = None
    num_prompts_mult: int | None = None
    num_warmup_mult: int | None = None
    dataset_name: str | None = None
    dataset_path: str | None = None
    agentperf_client_dir: str | None = None
    agentperf_config: str | None = None
    trace_file: str | None = None
    custom_tokenizer: str | None = None
    use_chat_template: bool = True
    reuse_http_connections: bool = False
    command: str | None = None
    container_image: str | None = None
    env: Env = {}
    aiperf_package: str | None = None
    aiperf_args: dict[str, Any] = {}
    slow_down_sleep_time: float | None = None
    slow_down_wait_time: float | None = None


class ProfilingPhaseConfig(Strict):
    start_step: int | None = None
    stop_step: int | None = None
    capture_scope: Literal["selected", "all"] = "all"
    worker_index: int = 0
    worker_rank: int = 0


class ProfilingConfig(Strict):
    type: str = "none"
    extra_nsys_args: list[str] | None = None
    nsys_trace: str = "cuda,nvtx"
    trace_fork_before_exec: bool | None = None
    capture_range_end: str = "stop"
    nsys_library_paths: list[str] | None = None
    prefill: ProfilingPhaseConfig | None = None
    decode: ProfilingPhaseConfig | None = None
    aggregated: ProfilingPhaseConfig | None = None
    delay_secs: int | None = None
    duration_secs: int | None = None
    benchmark_duration_secs: int = 300


class OutputConfig(Strict):
    log_dir: str | None = None
    record_launch_plan: bool = False


HOST_SETUP_REFUSED = (
    "unsupported feature: host_setup (commands on every node's bare host before the job's workers start, and "
    "teardown after they stop, belong to a batch job's life; the reconciler keeps allocations and relaunches "
    "workers in them, so there is no such moment: set the nodes up outside the reconciler)")


class HostSetupConfig(Strict):
    commands: list[str] = []
    teardown: list[str] = []
    nodes: Literal["all", "workers"] = "all"
    ignore_failure: bool = False
    timeout_seconds: int = 300

    @model_validator(mode="after")
    def _refused(self) -> "HostSetupConfig":
        if self.commands or self.teardown:
            raise ValueError(HOST_SETUP_REFUSED)
        return self


# "{port}": the port the allocator gives a generic service (the reconciler's own placeholder)
AllocPort = Literal["{port}"]


class TcpProbe(Strict):
    port: int | AllocPort


class HttpProbe(Strict):
    port: int | AllocPort
    path: str = "/health"
    status: int = 200


class LogProbe(Strict):
    pattern: str


class ServiceReadinessConfig(Strict):
    port: int | AllocPort | None = None
    tcp: TcpProbe | None = None
    http: HttpProbe | None = None
    log: LogProbe | None = None
    file: dict[str, Any] | None = None
    timeout_seconds: int = Field(120, gt=0, le=7 * 86400)
    interval_seconds: int = Field(2, gt=0, le=3600)


class ServicePlacementConfig(Strict):
    node: str = "head"
    pool: str | None = None
    per: str = "node"


class SourceConfig(Strict):
    git: str
    rev: str
    path: str | None = None
    sha: str | None = None


class ServiceMetricsConfig(Strict):
    port: int
    path: str = "/metrics"
    nodes: str = "all"
    name: str | None = None


class ServiceConfig(Strict):
    name: str
    type: str = "generic"
    command: list[str] | None = None
    args: list[str] = []
    container: str | None = None
    env: Env = {}
    source: SourceConfig | None = None
    build_command: list[str] | None = None
    placement: ServicePlacementConfig | None = None
    nodes: int | None = None
    start: str | None = None
    readiness: ServiceReadinessConfig | None = None
    inherit_discovery_env: bool = True
    critical: bool | None = None
    terminal: bool = False
    preamble: str | None = None
    cpus_per_task: int | None = None
    cpu_bind: str | None = None
    srun_options: SrunOptions = {}
    build_timeout_seconds: int = 1800
    enabled: bool = True
    external: str | None = None
    options: dict[str, Any] = {}
    metrics: list[ServiceMetricsConfig] | ServiceMetricsConfig = []


class TachometerConfig(Strict):
    enabled: bool | None = None
    binary_path: str = "tachometer-scraper"
    collect_interval_ms: int = 1000
    sync_interval_secs: int = 120
    shutdown_grace_secs: float = 120.0
    compaction_threads: int = 4
    storage_subdir: str = "tachometer"
    extra_metadata: dict[str, str] = {}
    default_exporters: bool = True
    default_gpu_exporter: dict[str, Any] | None = None
    dcgm_exporter: dict[str, Any] | None = None
    node_exporter: dict[str, Any] | None = None
    process_exporter: dict[str, Any] | None = None


class ObservabilityConfig(Strict):
    enabled: bool = False
    enable_otel: bool = False
    otel_endpoint: str | None = None
    scrape_metrics: bool | None = None
    tachometer: TachometerConfig = TachometerConfig()
    nsys: dict[str, Any] = {}


class TelemetryConfig(Strict):
    enabled: bool = False
    dcgm_exporter: dict[str, Any] | None = None
    collect_interval_ms: int = 1000
    storage_subdir: str = "power"
    required: bool = False
    clock_sync_check: bool = True
    startup_timeout_seconds: float = 30.0
    request_timeout_seconds: float = 2.0
    collector_join_timeout_seconds: float | None = None
    cpu_power_exporter: dict[str, Any] | None = None
    cpu_power: dict[str, Any] = {}


class PostEvalConfig(Strict):
    passthrough_env: list[str] = []
    command: list[str] | None = None


class IdentityModelConfig(Strict):
    repo: str | None = None
    revision: str | None = None


class IdentityContainerConfig(Strict):
    image: str | None = None


class IdentityConfig(Strict):
    model: IdentityModelConfig = IdentityModelConfig()
    container: IdentityContainerConfig = IdentityContainerConfig()
    frameworks: dict[str, str] = {}


class ReportingConfig(Strict):
    status: dict[str, Any] | None = None
    ai_analysis: dict[str, Any] | None = None
    s3: dict[str, Any] | None = None


class InfraConfig(Strict):
    """v1 only: ``infra.etcd_nats_dedicated_node``."""

    etcd_nats_dedicated_node: bool = False
    nats_max_payload_mb: int | None = Field(None, ge=1)
