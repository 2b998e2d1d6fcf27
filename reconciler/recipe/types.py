"""The base of every recipe section: strict (unknown keys are errors) and frozen; env values."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _env_value(v: Any) -> Any:
    # YAML turns `PYTHONUNBUFFERED: 1` into an int; the process sees text anyway
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return str(v)
    return v


def _env_name(k: str) -> str:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k):
        raise ValueError(f"expected an environment variable name (letters, digits, _), found {k!r}")
    return k


EnvValue = Annotated[str, BeforeValidator(_env_value)]
Env = dict[Annotated[str, AfterValidator(_env_name)], EnvValue]


class PlacementConfig(Strict):
    node: str = "head"
