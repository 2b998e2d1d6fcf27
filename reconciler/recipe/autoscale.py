"""``reconcile.autoscale``: the elastic-deployment block (ours; srtctl never sees it).

Each role named here is sized between ``min`` and ``max`` from its workers' own metrics
(``core/plan/autoscale.py`` decides, Kubernetes HPA ``behavior`` semantics); the role's
``workers:`` in the file is the starting count. Every number is bounded; the rules that need the
whole recipe (the role exists, min <= workers <= max) are ``check`` (run at admission, located).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from reconciler.errors import KeyedError
from reconciler.recipe.bounds import MAX_WORKERS
from reconciler.recipe.types import Strict

DAY = 86400.0


class Targets(Strict):
    """What one worker of the role should carry; any target above its value asks for more workers
    (the largest ask wins, as an HPA with several metrics). Latency targets only ever ask for more:
    a low latency says nothing about spare capacity; the load targets size the role down."""

    waiting_per_worker: float | None = Field(None, gt=0, le=100_000)  # requests queued per worker
    running_per_worker: float | None = Field(None, gt=0, le=100_000)  # requests in flight (running + queued) per worker
    kv_usage: float | None = Field(None, gt=0, le=1)  # KV-cache usage per worker, 1 = full
    ttft_p90_ms: float | None = Field(None, gt=0, le=3_600_000)  # time to first token, 90th percentile
    itl_p90_ms: float | None = Field(None, gt=0, le=600_000)  # inter-token latency, 90th percentile

    @model_validator(mode="after")
    def _some(self) -> Targets:
        if all(v is None for v in self.model_dump().values()):
            raise ValueError("expected at least one target (waiting_per_worker, running_per_worker, kv_usage, "
                             "ttft_p90_ms or itl_p90_ms)")
        return self


class RoleScale(Strict):
    min: int = Field(1, ge=0, le=MAX_WORKERS)
    max: int = Field(..., ge=1, le=MAX_WORKERS)
    target: Targets

    @model_validator(mode="after")
    def _range(self) -> RoleScale:
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) is above max ({self.max})")
        return self


class Limit(Strict):
    """HPA's scaling policies: at most max(``workers``, ``percent`` % of the count at the start
    of the period) added (or removed) per ``period_seconds``."""

    workers: int = Field(4, ge=1, le=MAX_WORKERS)
    percent: float = Field(100.0, ge=0, le=1000)
    period_seconds: float = Field(15.0, gt=0, le=DAY)


class AutoscaleRoles(Strict):
    prefill: RoleScale | None = None
    decode: RoleScale | None = None
    agg: RoleScale | None = None

    def items(self) -> list[tuple[str, RoleScale]]:
        return [(m, r) for m in ("prefill", "decode", "agg") if (r := getattr(self, m)) is not None]


class AutoscaleConfig(Strict):
    roles: AutoscaleRoles
    interval_seconds: float = Field(5.0, ge=1, le=600)  # metrics are read and a decision made this often
    scale_up_after_seconds: float = Field(0.0, ge=0, le=DAY)  # HPA scaleUp.stabilizationWindowSeconds
    scale_down_after_seconds: float = Field(300.0, ge=0, le=DAY)  # HPA scaleDown.stabilizationWindowSeconds
    # opt-in: every role (min 0) is released after this long without a request (None: never below 1);
    # at least a few decisions' worth, so that one quiet read does not release the deployment
    scale_to_zero_after_seconds: float | None = Field(None, ge=5, le=7 * DAY)
    # a request that comes while the deployment is at zero is held by the gateway this long while a
    # worker is brought back (Slurm queue + start), then answered 503 with the expected wait
    hold_timeout_seconds: float = Field(300.0, ge=1, le=1800)
    scale_up_limit: Limit = Limit()
    scale_down_limit: Limit = Limit(workers=1, percent=100.0)
    tolerance: float = Field(0.1, ge=0, le=1)  # HPA's: a ratio this close to 1 changes nothing
    # a scale-down victim leaves the routers, then at least this long and until its requests are
    # done (at most drain_timeout_seconds) before it is stopped
    drain_seconds: float = Field(3.0, ge=0, le=3600)
    drain_timeout_seconds: float = Field(120.0, ge=0, le=DAY)
    # reactive: today's HPA rule on the load now; predictive: sized for the load expected one measured
    # startup ahead (core/plan/forecast.py), the scale-down window derived from that startup
    policy: Literal["reactive", "predictive"] = "reactive"
    # predictive only: the trend's window (None: derived from the role's measured startup)
    forecast_window_seconds: float | None = Field(None, ge=2, le=3600)
    # warm spares: per autoscaled role, this many workers kept started and Ready but out of the
    # routers (core/plan/spares.py); a scale-up routes one at once and a new spare starts behind it.
    # Within max (a spare beyond it could never be routed), none while the role is at zero
    warm: int = Field(0, ge=0, le=100)

    @model_validator(mode="after")
    def _some_role(self) -> AutoscaleConfig:
        if not self.roles.items():
            raise ValueError("expected at least one role under roles (prefill, decode or agg)")
        if self.forecast_window_seconds is not None and self.policy != "predictive":
            raise ValueError("forecast_window_seconds is the predictive policy's trend window: it needs "
                             "policy: predictive")
        return self


def check(recipe) -> None:
    """The rules that need the whole recipe: each autoscaled role exists, its starting count lies
    in [min, max]; scale to zero is the whole deployment's (``_check_zero``)."""
    cfg: AutoscaleConfig | None = recipe.reconcile.autoscale
    if cfg is None:
        return
    layouts = recipe.role_layouts()
    for role, rs in cfg.roles.items():
        key = f"reconcile.autoscale.roles.{role}"
        if role not in layouts:
            have = ", ".join(layouts) or "none"
            raise KeyedError(key, f"the recipe has no role {role!r} (its roles: {have})")
        workers = layouts[role].workers
        if not rs.min <= workers <= rs.max:
            raise KeyedError(key, f"roles.{role}.workers ({workers}) is the starting count and must lie in "
                                  f"[min, max] = [{rs.min}, {rs.max}]")
        if role == "prefill" and "decode" in layouts and layouts["decode"].colocate:
            # the colocated decode workers' GPUs come after the prefill workers' on the same nodes
            raise KeyedError(key, "roles.decode colocates on the prefill nodes: its workers' GPUs follow the "
                                  "prefill count, so each prefill change would move (roll) every decode worker; "
                                  "give decode nodes of its own to autoscale prefill (decode alone may be)")
    if cfg.warm and all(rs.max == rs.min for _, rs in cfg.roles.items()):
        # a spare is kept only below max: with max == min every role is always at it
        raise KeyedError("reconcile.autoscale.warm", f"warm ({cfg.warm}) spares are kept within each role's max, "
                                                     "and every role here has max == min: none would ever be kept")
    _check_zero(recipe, cfg, layouts)


def _check_zero(recipe, cfg: AutoscaleConfig, layouts) -> None:
    """Scale to zero releases the whole deployment: every role at zero, the frontend gone, and the
    gateway holding the requests until a worker is back. A role left at 1 beside one at 0 would keep
    a frontend that fails every request instead of the gateway holding it, so it is all or nothing."""
    zero = [role for role, rs in cfg.roles.items() if rs.min == 0]
    key = "reconcile.autoscale.scale_to_zero_after_seconds"
    if cfg.scale_to_zero_after_seconds is None:
        if zero:
            raise KeyedError(f"reconcile.autoscale.roles.{zero[0]}.min",
                             "min 0 needs reconcile.autoscale.scale_to_zero_after_seconds (how long without a "
                             "request before the role is released)")
        return
    autoscaled = dict(cfg.roles.items())
    for role in layouts:
        if role not in autoscaled or autoscaled[role].min != 0:
            where = f"reconcile.autoscale.roles.{role}" + (".min" if role in autoscaled else "")
            raise KeyedError(where, f"scale to zero releases the whole deployment: every role needs min: 0 "
                                    f"(role {role!r} would keep a frontend that fails requests instead of the "
                                    f"gateway holding them)")
    if recipe.frontend.type == "none":
        raise KeyedError(key, "scale to zero needs a frontend (frontend.type): its gateway holds the "
                              "requests while the deployment is at zero")
