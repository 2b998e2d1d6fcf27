"""The recipe's ``slurm:`` section: account, partition, time limit, and ours: time_min and reservation."""

from __future__ import annotations

import re
from typing import Any

from pydantic import ValidationInfo, field_validator

from reconciler.recipe.types import Strict
from reconciler.timefmt import slurm_seconds


class SlurmConfig(Strict):
    account: str | None = None
    partition: str | None = None
    time_limit: str | None = None
    # ours: sbatch --time-min, the shortest limit the recipe accepts; Slurm may start the job earlier
    # with a limit between the two (backfill) and the hand-over follows the limit it granted
    time_min: str | None = None
    # sbatch --reservation: the allocations run inside these reservations (a comma list of names)
    reservation: str | None = None

    @field_validator("time_limit", "time_min", mode="before")
    @classmethod
    def _time(cls, v: Any) -> Any:
        if v is None:
            return v
        v = str(v)
        if not re.fullmatch(r"(\d+-)?\d+(:\d{1,2}){0,2}|UNLIMITED|INFINITE", v, re.I):
            raise ValueError(f"expected a Slurm time limit like '04:00:00', '2-00:00:00' or '90', found {v!r}")
        return v

    @field_validator("time_min")
    @classmethod
    def _time_min(cls, v: str | None, info: ValidationInfo) -> str | None:
        if v is None:
            return v
        low, high = slurm_seconds(v), slurm_seconds(info.data.get("time_limit"))
        if low is None or low < 60:
            raise ValueError(f"expected a time of at least one minute (a worker must have time to start), found {v!r}")
        if high is not None and low > high:
            raise ValueError(f"{v!r} is longer than slurm.time_limit {info.data.get('time_limit')!r}: "
                             "Slurm would refuse the job")
        return v

    @field_validator("reservation")
    @classmethod
    def _reservation(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"[A-Za-z0-9_.-]+(,[A-Za-z0-9_.-]+)*", v):
            raise ValueError(f"expected a Slurm reservation name (or a comma list of them), found {v!r}")
        return v
