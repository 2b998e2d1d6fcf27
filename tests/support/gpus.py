"""A step that prints the GPU mask it was given, run through the launcher on this host."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from reconciler.drivers.base import step_env, wrapped_argv
from reconciler.world import Launch


SHOW = ("/bin/sh", "-c", 'printf "%s|%s" "${CUDA_VISIBLE_DEVICES-unset}" "${SLURM_STEP_GPUS-}"')


def launch(mask: str | None, var: str = "CUDA_VISIBLE_DEVICES") -> Launch:
    env = (("A", "1"),) + (((var, mask),) if mask is not None else ())
    return Launch(0, ("n",), 1, None, SHOW, env, visible_env=var if mask is not None else "")


def run_local(l: Launch, tmp_path: Path, inherited: dict[str, str]) -> tuple[int, str, str, str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("VISIBLE_DEVICES")} | inherited | step_env(l)
    status = tmp_path / "st"
    p = subprocess.run(wrapped_argv(l, status, "STEP"), env=env, capture_output=True, text=True, timeout=30)
    return p.returncode, p.stdout, p.stderr, status.read_text().split()[0]
