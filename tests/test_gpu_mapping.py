"""A worker's GPU indices are its job's own (0..n-1); the step maps them onto the devices Slurm
gave it, so two jobs sharing a node never share a GPU (drivers/base.LAUNCHER)."""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import replace

import pytest

from reconciler.drivers.base import step_env, wrapped_argv
from support.gpus import launch, run_local



@pytest.mark.parametrize("mask,inherited,seen", [
    ("0", {"CUDA_VISIBLE_DEVICES": "4,5"}, "4"),  # the second job on a node without device confinement
    ("1", {"CUDA_VISIBLE_DEVICES": "4,5"}, "5"),
    ("0,1", {"CUDA_VISIBLE_DEVICES": "6,7,2,3"}, "6,7"),  # Slurm's order, not sorted
    ("2,3", {"CUDA_VISIBLE_DEVICES": "6,7,2,3"}, "2,3"),
    ("1", {"CUDA_VISIBLE_DEVICES": "0,1"}, "1"),  # cgroup-confined: Slurm renumbers from 0
    ("1", {}, "1"),  # no Slurm list (the local driver, a job without gres): as it is
])
def test_logical_indices_map_onto_the_steps_gpus(tmp_path, mask, inherited, seen):
    rc, out, err, recorded = run_local(launch(mask), tmp_path, inherited)
    assert (rc, out.split("|")[0], recorded) == (0, seen, "0"), err


def test_another_variable_maps_through_slurms_cuda_list(tmp_path):
    """An AMD cluster's variable (the cluster config's visible_devices_env): Slurm sets only
    CUDA_VISIBLE_DEVICES there, which lists the same devices."""
    l = replace(launch("1", var="HIP_VISIBLE_DEVICES"), argv=("/bin/sh", "-c", 'printf %s "$HIP_VISIBLE_DEVICES"'))
    rc, out, _, _ = run_local(l, tmp_path, {"CUDA_VISIBLE_DEVICES": "2,3"})
    assert (rc, out) == (0, "3")


def test_an_index_the_step_does_not_hold_fails_the_life_with_the_reason(tmp_path):
    rc, out, err, recorded = run_local(launch("2"), tmp_path, {"CUDA_VISIBLE_DEVICES": "4,5"})
    assert (rc, out, recorded) == (97, "", "97")
    assert "GPU 2 is not one this step holds (CUDA_VISIBLE_DEVICES=4,5)" in err


def test_a_variable_the_recipe_sets_itself_is_passed_as_written(tmp_path):
    l = replace(launch("0"), visible_env="")  # not the reconciler's mask: no mapping
    rc, out, _, _ = run_local(l, tmp_path, {"CUDA_VISIBLE_DEVICES": "4,5"})
    assert (rc, out.split("|")[0]) == (0, "0")


def sh(*argv: str) -> str:
    return subprocess.run(argv, check=True, capture_output=True, text=True, timeout=60).stdout


@pytest.mark.slurm
def test_two_jobs_on_one_node_never_share_a_gpu(tmp_path):
    """On the real Slurm (no device confinement: the step sees global indices): logical GPU 1 of
    each of two 2-GPU jobs is that job's own second GPU. Without the mapping both would be GPU 1."""
    jobs = [sh("sbatch", "--parsable", "-J", "gpu-map-check", "-N1", "--gres=gpu:2", "--output=/dev/null",
               "--wrap", "sleep 120").strip() for _ in range(2)]
    try:
        deadline = time.time() + 60
        while any(sh("squeue", "-h", "-j", j, "-o", "%T").strip() != "RUNNING" for j in jobs):
            assert time.time() < deadline, "the jobs did not start"
            time.sleep(0.2)
        seen = []
        for j in jobs:
            step = launch("1")
            argv = wrapped_argv(step, tmp_path / f"st-{j}", "STEP")
            # the step's environment goes through srun's own, as the driver passes it
            out = subprocess.run(["srun", f"--jobid={j}", "--overlap", "-J", "gpu-map-check", "--", *argv],
                                 capture_output=True, text=True, timeout=60, check=True,
                                 env={**os.environ, **step_env(step)}).stdout
            mapped, step_gpus = out.split("|")
            assert mapped == step_gpus.split(",")[1], out  # the job's own second GPU
            seen.append(mapped)
        assert seen[0] != seen[1], seen
    finally:
        subprocess.run(["scancel", *jobs], check=False)
