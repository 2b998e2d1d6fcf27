"""``engine.failover``'s schema (the layout and rules are ``reconciler/failover.py``)."""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from reconciler.recipe.types import Strict


class FailoverConfig(Strict):
    """``engine.failover``: srtctl's two knobs, plus the restart pair of its early examples."""
    shadow_engines: int = Field(1, ge=1, le=16)  # each is an engine step holding its own ports
    shared_dir: str = "/dev/shm"
    # the corpus's example writes the relaunch policy here (srtctl later moved it to roles.<role>.restart);
    # set, it is the engines' restart policy and backoff
    restart: str | bool | None = None
    restart_backoff_seconds: float | None = Field(None, ge=0)

    @field_validator("shared_dir")
    @classmethod
    def _absolute(cls, v: str) -> str:
        if not v.startswith("/") or v.rstrip("/") == "":
            raise ValueError(f"expected an absolute directory below /, found {v!r}")
        return v

    @field_validator("restart", mode="before")
    @classmethod
    def _policy(cls, v: Any) -> Any:  # before: a number (1, 0) is not taken for a boolean
        if v is None or isinstance(v, bool) or v in ("always", "never", "on-failure"):
            return v
        raise ValueError(f"expected always, never, on-failure or a boolean, found {v!r}")

    @property
    def engines(self) -> int:
        return 1 + self.shadow_engines

    @property
    def policy(self) -> str | None:
        if self.restart is None:
            return None
        if isinstance(self.restart, bool):
            return "always" if self.restart else "never"
        return self.restart
