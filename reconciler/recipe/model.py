"""The recipe model: srtctl schema 2, strict.

Everything here forbids unknown keys (srt-slurm users lost jobs to silently
dropped keys) and is frozen. Sections the reconciler reads are typed precisely;
srtctl sections it only carries (benchmark, profiling, telemetry, ...) are typed
from srtctl's reference so typos are still caught. v1 recipes are normalised into
this model by ``reconciler.recipe.v1`` before validation.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any, Literal, Union

from pydantic import BeforeValidator, ConfigDict, Field, field_validator, model_validator

from reconciler.recipe.carried import (  # noqa: F401 - the sections Recipe carries
    DynamoSourceConfig, DynamoConfig, SweepConfig, BenchmarkConfig, ProfilingPhaseConfig, ProfilingConfig,
    OutputConfig, HostSetupConfig, TcpProbe, HttpProbe, LogProbe, ServiceReadinessConfig,
    ServicePlacementConfig, SourceConfig, ServiceMetricsConfig, ServiceConfig, TachometerConfig,
    ObservabilityConfig, TelemetryConfig, PostEvalConfig, IdentityModelConfig, IdentityContainerConfig,
    IdentityConfig, ReportingConfig, InfraConfig,
)
from reconciler.recipe.types import (  # noqa: F401
    ArgName, Env, EnvValue, PlacementConfig, SbatchOptions, SrunOptions, Strict, WorkerEnv, _env_value, check_regex,
)
from reconciler.recipe.engines import ENGINES, Engine, VLLMEngine, engine_list_text
from reconciler.recipe.bounds import MAX_GPUS_PER_WORKER, MAX_NODES_PER_WORKER, MAX_WORKERS
from reconciler.recipe.slurm import SlurmConfig  # noqa: F401 - a section of Recipe
from reconciler.recipe.reconcile import ReconcileConfig, RolloutConfig  # noqa: F401 - our own section
from reconciler.recipe.topology import MODES, Mode, RoleLayout, one_node_split

from reconciler.recipe.namespaces import NAME_RE  # defined in the leaf: `logs` checks a name without pydantic
FRONTEND_TYPES = (
    "builtin", "dynamo", "sglang-router", "sgl-router", "vllm-router", "atomesh", "tilert-router",
    "sglang", "vllm", "trtllm_serve", "none",
)


def _engine_mapping(v: Any) -> Any:
    if isinstance(v, str):
        v = {"type": v}
    if isinstance(v, dict):
        t = v.get("type")
        if t is None:
            raise ValueError(f"engine needs a 'type' ({engine_list_text('or')})")
        if isinstance(t, str) and t not in ENGINES:
            raise ValueError(f"unknown engine type {t!r}: expected {engine_list_text('or')}")
    return v


# The one schema field that selects an engine's knobs by `type` (recipe/engines.py).
EngineConfig = Annotated[
    Union[tuple(ENGINES.values())],  # type: ignore[valid-type]
    Field(discriminator="type"),
    BeforeValidator(_engine_mapping),  # after Field: runs before the discriminator
]


# ---------------------------------------------------------------- sections we act on
class ModelConfig(Strict):
    path: str
    container: str | None = None
    precision: str | None = None
    stage_dir: str | None = None


class ResourceConfig(Strict):
    gpu_type: str | None = None
    gpus_per_node: int = Field(4, ge=1, le=64)
    spread_workers: bool = False
    het_jobs: bool | None = None


class RestartConfig(Strict):
    policy: Literal["never", "on-failure", "always"] = "always"
    max_restarts: int | None = Field(None, ge=0)
    backoff_seconds: float = Field(10.0, ge=0)
    max_backoff_seconds: float = Field(300.0, ge=0)
    reset_after_seconds: float = Field(600.0, ge=0)


def _restart_shorthand(v: Any) -> Any:
    return {"policy": v} if isinstance(v, str) else v


class RoleConfig(Strict):
    nodes: int | Literal["colocate"] | None = Field(None)
    workers: int | None = Field(None, ge=0, le=MAX_WORKERS)
    gpus: int | None = Field(None, ge=1, le=MAX_GPUS_PER_WORKER)
    srun_options: SrunOptions = {}
    env: WorkerEnv = {}
    args: dict[ArgName, Any] = {}
    extra_args: list[str] = []
    engine: EngineConfig | None = None
    container: str | None = None
    kv_events: bool | dict[str, Any] | None = None

    @field_validator("kv_events")
    @classmethod
    def _kv_events(cls, v: Any) -> Any:
        if isinstance(v, dict) and "endpoint" in v:
            raise ValueError("kv_events.endpoint is the reconciler's: each worker publishes on a port it "
                             "allocates (tcp://*:<port>); remove endpoint")
        return v
    sidecar: bool | None = None
    critical: bool = True
    restart: Annotated[RestartConfig, BeforeValidator(_restart_shorthand)] = RestartConfig()
    mooncake_store_config: dict[str, Any] | None = None

    @field_validator("nodes")
    @classmethod
    def _nodes(cls, v: Any) -> Any:
        if isinstance(v, int) and not 0 <= v <= MAX_NODES_PER_WORKER:
            raise ValueError(f"expected a node count from 0 to {MAX_NODES_PER_WORKER} or 'colocate'")
        return v


class Roles(Strict):
    prefill: RoleConfig | None = None
    decode: RoleConfig | None = None
    agg: RoleConfig | None = None

    def get(self, mode: str) -> RoleConfig | None:
        return getattr(self, mode, None)

    def items(self) -> list[tuple[Mode, RoleConfig]]:
        return [(m, r) for m in MODES if (r := getattr(self, m)) is not None]

    def __getitem__(self, mode: str) -> RoleConfig:
        r = self.get(mode)
        if r is None:
            raise KeyError(mode)
        return r


def _none_is_empty(v: Any) -> Any:
    return {} if v is None else v


class FrontendConfig(Strict):
    type: str = "dynamo"
    args: Annotated[dict[ArgName, Any], BeforeValidator(_none_is_empty)] = {}
    env: Annotated[Env, BeforeValidator(_none_is_empty)] = {}
    enable_multiple_frontends: bool | None = None
    num_additional_frontends: int | None = None
    nginx_container: str | None = None
    nginx_raise_ulimit: bool | None = None
    nginx_session_affinity: bool = False
    nginx_session_affinity_header: str = "X-Dynamo-Session-ID"
    nginx_keepalive_timeout: str = "600s"
    worker_selection: dict[str, Any] | None = None
    numa_bind: bool = False
    ctx_router: dict[str, Any] | None = None
    gen_router: dict[str, Any] | None = None
    server_config_extra: dict[str, Any] | None = None
    container_image: str | None = None
    placement: PlacementConfig = PlacementConfig()
    port: int | None = Field(None, ge=1, le=65535)

    @field_validator("type")
    @classmethod
    def _type(cls, v: str) -> str:
        if v not in FRONTEND_TYPES:
            raise ValueError(f"expected one of {', '.join(FRONTEND_TYPES)}, found {v!r}")
        return v


class HealthCheckConfig(Strict):
    max_attempts: int = Field(180, ge=1)
    interval_seconds: float = Field(10, gt=0)
    fatal_log_markers: bool = True
    extra_fatal_log_patterns: list[str] = []

    @field_validator("extra_fatal_log_patterns")
    @classmethod
    def _regex(cls, v: list[str]) -> list[str]:
        for p in v:
            check_regex(p)
        return v


# Top-level sections the reconciler reads; everything else is carried for srtctl.
ACTED_ON = frozenset(
    {"schema", "name", "model", "resources", "slurm", "engine", "roles", "frontend", "health_check",
     "environment", "srun_options", "sbatch_directives", "reconcile", "container_mounts", "extra_mount",
     "dynamo", "services", "infra", "setup_script"}
)


class Recipe(Strict):
    schema_: Literal[2] | None = Field(None, alias="schema")
    name: str
    model: ModelConfig
    resources: ResourceConfig = ResourceConfig()
    slurm: SlurmConfig = SlurmConfig()
    engine: EngineConfig | None = None
    roles: Roles = Roles()
    frontend: FrontendConfig = FrontendConfig()
    dynamo: DynamoConfig = DynamoConfig()
    benchmark: BenchmarkConfig = BenchmarkConfig()
    profiling: ProfilingConfig = ProfilingConfig()
    output: OutputConfig = OutputConfig()
    health_check: HealthCheckConfig = HealthCheckConfig()
    observability: ObservabilityConfig = ObservabilityConfig()
    telemetry: TelemetryConfig = TelemetryConfig()
    environment: WorkerEnv = {}
    container_mounts: dict[str, str] = {}
    extra_mount: list[str] | None = None
    srun_options: SrunOptions = {}
    sbatch_directives: SbatchOptions = {}
    enable_config_dump: bool = True
    # a script in srtctl's configs directory (/configs in the worker's container), run before the worker
    setup_script: str | None = Field(None, pattern=r"^[A-Za-z0-9_+-][A-Za-z0-9_.+-]*(/[A-Za-z0-9_+-][A-Za-z0-9_.+-]*)*$")
    host_setup: HostSetupConfig = HostSetupConfig()
    services: list[ServiceConfig] = []
    post_eval: PostEvalConfig = PostEvalConfig()
    identity: IdentityConfig = IdentityConfig()
    reporting: ReportingConfig | None = None
    infra: InfraConfig | None = None
    reconcile: ReconcileConfig = ReconcileConfig()

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if ".." in v or not NAME_RE.fullmatch(v):
            raise ValueError(
                "expected 1-200 characters of letters, digits, '-', '_' or '.', starting with a letter or digit"
                f" and without '..', found {v!r}"
            )
        return v

    @model_validator(mode="after")
    def _engines(self) -> Recipe:
        role_engines = {m: r.engine for m, r in self.roles.items() if r.engine is not None}
        if self.engine is not None and role_engines:
            raise ValueError("use either a top-level engine or roles.<role>.engine on every role, never both")
        if self.engine is None:
            missing = [m for m, r in self.roles.items() if r.engine is None]
            if missing or not role_engines:
                raise ValueError("no engine: set a top-level 'engine' (or 'engine' on every role)")
            types = {e.type for e in role_engines.values()}
            if len(types) > 1:
                _check_mixed(self, role_engines)
        if not self.roles.items():
            raise ValueError("no roles: declare roles.agg, or roles.prefill and roles.decode")
        has = {m for m, _ in self.roles.items()}
        if "agg" in has and has & {"prefill", "decode"}:
            raise ValueError("a recipe is aggregated (agg) or disaggregated (prefill + decode), never both")
        if has == {"prefill"} or has == {"decode"}:
            raise ValueError("a disaggregated recipe needs both roles.prefill and roles.decode")
        return self

    # ---------------------------------------------------------------- derived
    @property
    def serving_engine(self) -> Engine:
        """The recipe's engine knobs; with per-role engines, the serving role's (decode, else agg,
        else prefill), as srtctl's ``config.backend``. Its behaviour: ``backends.backend_of``."""
        eng = self.engine
        if eng is None:
            for mode in ("decode", "agg", "prefill"):
                role = self.roles.get(mode)
                if role is not None and role.engine is not None:
                    eng = role.engine
                    break
        assert eng is not None  # _engines: every role has one when the recipe has none
        return eng

    def engine_for(self, mode: str) -> Engine:
        """The knobs of the engine that runs ``mode``: its own ``roles.<mode>.engine``, else the recipe's."""
        role = self.roles.get(mode)
        return role.engine if role is not None and role.engine is not None else self.serving_engine

    @property
    def mixed_engines(self) -> bool:
        return len({self.engine_for(m).type for m, _ in self.roles.items()}) > 1

    @property
    def disaggregated(self) -> bool:
        return self.roles.prefill is not None

    def role_layouts(self) -> dict[Mode, RoleLayout]:
        """Nodes, workers and GPUs per worker of each role, srtctl's defaults applied."""
        from reconciler.recipe.topology import TopologyError

        gpn = self.resources.gpus_per_node
        out: dict[Mode, RoleLayout] = {}
        for mode, role in self.roles.items():
            key = f"roles.{mode}"
            colocate = role.nodes == "colocate" or (mode == "decode" and role.nodes == 0)
            nodes = 0 if colocate else role.nodes
            workers = role.workers
            gpus = role.gpus
            if colocate and mode != "decode":
                raise TopologyError(f"{key}.nodes", "only the decode role can colocate (nodes: 0 or 'colocate')")
            if workers is None:
                workers = 1 if nodes or colocate else None
            if workers is None:
                raise TopologyError(f"{key}.workers", "expected a worker count")
            if gpus is None:
                if colocate:
                    # srtctl: colocated decode workers are sized like the prefill workers
                    pre = out.get("prefill")
                    if pre is None:
                        raise TopologyError(f"{key}.gpus", "colocated decode needs 'gpus' per worker")
                    gpus = pre.gpus
                elif nodes:
                    if workers == 0:
                        gpus = gpn
                    else:
                        gpus = max(1, nodes * gpn // workers)
                else:
                    raise TopologyError(f"{key}.gpus", "expected 'gpus' per worker or 'nodes' for the role")
            if nodes is None:
                packed = gpus < gpn and not self.resources.spread_workers  # spread: a node per worker
                nodes = math.ceil(workers * gpus / gpn) if packed else workers * math.ceil(gpus / gpn)
            out[mode] = RoleLayout(mode, nodes, workers, gpus, colocate)
        roles = self.roles
        # srtctl reads the knob off config.backend (the serving role's engine) and only on vLLM
        served = self.serving_engine
        pd_colocation = isinstance(served, VLLMEngine) and served.allow_prefill_decode_colocation
        return one_node_split(out, roles.prefill is not None and roles.prefill.nodes is not None,
                              roles.decode is not None and roles.decode.nodes is not None, gpn,
                              self.resources.spread_workers, pd_colocation)


def _check_mixed(recipe: Recipe, engines: dict) -> None:
    """srtctl's rules for per-role engines of different types."""
    types = ", ".join(f"{m}={e.type}" for m, e in engines.items())
    if recipe.frontend.type == "dynamo":
        raise ValueError(f"per-role engines of different types ({types}) do not support the Dynamo frontend "
                         "(srtctl's rule): choose a static router")
    for m, e in engines.items():
        if getattr(e, "mooncake_kv_store", None) is not None or getattr(e, "failover", None) is not None:
            raise ValueError(f"roles.{m}.engine: per-role engines of different types support neither an implicit "
                             "Mooncake store nor failover")
