"""``engine.mooncake_kv_store`` (v1: ``backend.mooncake_kv_store``): the Mooncake KV store's knobs.

A recipe that sets it runs the ``mooncake-master`` service (``reconciler.desired.services``);
a ``services:`` entry of that type is the other spelling of the same thing.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from reconciler.recipe.types import Env, Strict


class MooncakeKVStoreConfig(Strict):
    container: str | None = None  # the master's image; default: the job container
    master_extra_args: list[str] = []  # appended to mooncake_master
    env: Env = {}  # on every worker, not on the master
    store_config: dict[str, Any] | None = None  # vLLM: rendered to the JSON MOONCAKE_CONFIG_PATH names
    default_kv_lease_ttl_ms: int = Field(10000, ge=1)
    device_names_by_gpu: list[str] | None = None

    @field_validator("master_extra_args")
    @classmethod
    def _args(cls, v: list[str]) -> list[str]:
        for a in v:
            if not str(a).strip():
                raise ValueError("an entry is blank")
        return [str(a) for a in v]
