"""The ``reconcile:`` section: the reconciler's own keys (srtctl never sees them)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from reconciler.recipe.autoscale import AutoscaleConfig
from reconciler.recipe.bench_policy import BenchmarkPolicy
from reconciler.recipe.bounds import MAX_WORKERS
from reconciler.recipe.gateway import GatewaySettings
from reconciler.recipe.rollout import RolloutConfig
from reconciler.recipe.types import Strict


class ReconcileConfig(Strict):
    """Our own additions; srtctl ignores nothing here because it never sees it."""

    suspend: bool = False
    rollout: RolloutConfig = RolloutConfig()
    nodes_per_allocation: int | None = Field(None, ge=1)
    # a successor allocation is submitted when a running one has less than this left (None: the
    # workers' launch-to-Ready + 60 s, at least 120 s; at most half the time limit either way)
    handover_seconds: float | None = Field(None, gt=0)
    container_runtime: Literal["pyxis", "none"] = "pyxis"
    # the interpreter that runs dynamo.* and the engines' modules: one word (a command or a path)
    engine_python: str = "python3"
    liveness_failures: int = Field(3, ge=1, le=1000)
    # ... and failing for at least this long: dead is a time, not a count of passes (a pass comes
    # every 0.5 s while anything converges, so three failures alone could be a CPU stall of ~2 s)
    liveness_seconds: float = Field(10.0, ge=0, le=3600)
    # how Dynamo components find each other: etcd (srtctl's way) or files in a shared directory
    discovery: Literal["etcd", "file"] | None = None
    discovery_dir: str | None = None  # file discovery: a directory every node of the recipe sees
    # the variable that limits a worker to its GPUs (ROCm: ROCR_VISIBLE_DEVICES); srtctl's cluster
    # config key visible_devices_env sets it
    visible_devices_env: str = Field("CUDA_VISIBLE_DEVICES", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    # the NIC whose IPv4 address the workers pass as an address (--master-addr, MASTER_ADDR, ...),
    # resolved on each node at launch (reconciler.desired.netaddr); a comma list is tried in order.
    # srtctl's cluster config key network_interface sets it; unset: hostnames
    network_interface: str | None = Field(None, pattern=r"^[A-Za-z0-9_.:@-]+(,[A-Za-z0-9_.:@-]+)*$")
    # the host directory mounted at /configs, where setup_script is found (srtctl: <srtctl_root>/configs)
    configs_dir: str | None = None
    # the cluster config's default_bash_preamble: shell text run before every container step (reconciler.desired.preambles)
    bash_preamble: str | None = None
    autoscale: AutoscaleConfig | None = None  # elastic roles (recipe/autoscale.py)
    # run the recipe's benchmark: section (aiperf) after Ready / rollouts / periodically
    benchmark: BenchmarkPolicy | None = None
    gateway: GatewaySettings = GatewaySettings()  # the stable address: where it listens, how long it holds
    # Available (Kubernetes' Deployment condition) needs this many serving workers in every role
    # (capped at the role's current count: a role scaled to 1 needs its 1)
    min_available: int = Field(1, ge=1, le=MAX_WORKERS)

    @field_validator("engine_python")
    @classmethod
    def _engine_python(cls, v: str) -> str:
        if not v or any(c.isspace() for c in v):
            raise ValueError(f"expected one command or path (like python3 or /opt/venv/bin/python), found {v!r}")
        return v

    @field_validator("discovery_dir")
    @classmethod
    def _discovery_dir(cls, v: str | None) -> str | None:
        # every node must see the same directory: a relative one would be each step's working directory
        if v is not None and not v.startswith("/"):
            raise ValueError(f"expected an absolute directory every node of the recipe sees, found {v!r}")
        return v

    @model_validator(mode="after")
    def _gateway_job_holds_nothing_at_zero(self) -> "ReconcileConfig":
        # at zero the autoscaler reads the waiting requests off the holder on this host; a gateway
        # in its own job has its holder on its node
        a = self.autoscale
        if self.gateway.allocation is not None and a is not None and a.scale_to_zero_after_seconds is not None:
            raise ValueError("gateway.allocation and autoscale.scale_to_zero_after_seconds cannot be used together: "
                             "a deployment at zero is woken by the requests its gateway holds on the reconciler's "
                             "host; remove one of them")
        return self
