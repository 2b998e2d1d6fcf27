"""Where workloads run: a real Slurm (``slurm``) or local process groups (``local``)."""

from __future__ import annotations

import shutil
from pathlib import Path

from reconciler.drivers.base import Driver, DriverError


def make_driver(name: str | None, state_dir: Path, owner: str | None = None) -> Driver:
    """``owner`` names this reconciler on the cluster (default: derived from the state directory)."""
    from reconciler.labels import check_owner, default_owner

    owner = check_owner(owner) if owner else default_owner(state_dir)
    if name is None:
        name = "slurm" if shutil.which("sbatch") else "local"
    if name == "slurm":
        from reconciler.drivers.slurm import SlurmDriver

        return SlurmDriver(state_dir, owner=owner)
    if name == "local":
        from reconciler.drivers.local import LocalDriver

        return LocalDriver(state_dir, owner=owner)
    raise DriverError(f"unknown driver {name!r} (slurm or local)")


__all__ = ["Driver", "DriverError", "make_driver"]
