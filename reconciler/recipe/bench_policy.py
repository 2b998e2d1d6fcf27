"""``reconcile.benchmark``: when a recipe's srtctl ``benchmark:`` section runs (ours, opt-in)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from reconciler.recipe.types import Strict

_DURATION = r"^[1-9][0-9]{0,5}(s|m|h|d)$"
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def duration_seconds(text: str) -> float:
    """``30s``, ``15m``, ``24h``, ``7d`` in seconds (the pattern above has already checked it)."""
    return float(int(text[:-1]) * _UNIT_SECONDS[text[-1]])


class BenchmarkPolicy(Strict):
    """When the recipe's srtctl ``benchmark:`` section runs (reconciler/desired/bench_map.py maps
    it to aiperf). Opt-in: without this key the section is carried, as srtctl files always have one."""

    on: list[Literal["ready", "rollout"]] = Field(default_factory=lambda: ["ready"], max_length=2)
    every: str | None = Field(None, pattern=_DURATION)  # again this long after the last run ended
    max_error_rate: float = Field(0.0, ge=0.0, le=1.0)  # failed / sent above this: the run is Failed
    timeout_seconds: float = Field(3600.0, ge=10.0, le=86400.0)  # the whole run, every concurrency

    @model_validator(mode="before")
    @classmethod
    def _yaml_on(cls, data: Any) -> Any:
        # YAML 1.1 reads a bare `on:` key as the boolean true (as GitHub Actions files know)
        if isinstance(data, dict) and True in data and "on" not in data:
            data = {("on" if k is True else k): v for k, v in data.items()}
        return data

    @field_validator("on")
    @classmethod
    def _first_run(cls, v: list[str]) -> list[str]:
        if "ready" not in v:
            raise ValueError("on must include ready: the first run is when the recipe first becomes Ready")
        return v

    @field_validator("every")
    @classmethod
    def _every_bounds(cls, v: str | None) -> str | None:
        if v is not None and not 60 <= duration_seconds(v) <= 30 * 86400:
            raise ValueError("every must be between 1m and 30d")
        return v
