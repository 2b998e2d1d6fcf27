"""The local Slurm from scripts/slurm-dev.sh takes jobs, GPUs and overlapping steps."""

from __future__ import annotations

import subprocess
import time

import pytest

pytestmark = pytest.mark.slurm


def sh(*argv: str) -> str:
    return subprocess.run(argv, check=True, capture_output=True, text=True, timeout=60).stdout


def test_sbatch_gres_and_overlapping_step():
    jid = sh("sbatch", "--parsable", "-J", "harness-check", "-N1", "--gres=gpu:2", "--output=/dev/null",
             "--wrap", "sleep 120").strip()
    try:
        deadline = time.time() + 30
        while sh("squeue", "-h", "-j", jid, "-o", "%T").strip() != "RUNNING":
            assert time.time() < deadline, "job did not start"
            time.sleep(0.2)
        out = sh("srun", f"--jobid={jid}", "--overlap", "-J", "probe", "bash", "-c", "echo $CUDA_VISIBLE_DEVICES")
        # two GPUs, whichever two: tests running beside this one may hold others
        gpus = out.strip().split(",")
        assert len(gpus) == 2 and len(set(gpus)) == 2 and all(g.isdigit() for g in gpus), out
    finally:
        subprocess.run(["scancel", jid], check=False)
