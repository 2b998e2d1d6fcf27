"""A job the reconciler submitted but its squeue does not list is not submitted again (issue 48,
item 3), on the real Slurm.

``sbatch_directives: {uid: nobody}`` submitted each job as another user: ``squeue -u root``
never listed it, the plan asked for the allocation again at every pass, and 44 jobs were
submitted in 20 s. ``uid`` is refused at validate now; the same blindness is made here by a
driver that lists another user's jobs than the one it submits as (the reconciler runs as root,
its squeue asks for ``nobody``'s). One job is submitted, the reason is said once, and only when
Slurm says that job ended is the allocation submitted again.
"""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from harness import scancel
from helpers import wait_until
from reconciler.drivers.slurm import SlurmDriver
from reconciler.shell.loop import Controller

pytestmark = pytest.mark.slurm

RECIPE = """\
name: unseen
model: {path: m}
resources: {gpus_per_node: 8}
engine: {type: mocker, speedup_ratio: 100}
roles: {agg: {workers: 1, gpus: 1}}
frontend: {type: none}
"""
PASSES_FOR = 5.0  # seconds of passes, back to back (the reported case: 44 submissions in 20 s)


def _events(state, kind: str) -> list[dict]:
    lines = (state / "events.jsonl").read_text().splitlines()
    return [e for e in map(json.loads, lines) if e["kind"] == kind]


def _user_of(job: str) -> str:
    return subprocess.run(["squeue", "-h", "-j", job, "-o", "%u"], capture_output=True, text=True,
                          timeout=60).stdout.strip()


def test_a_submitted_job_squeue_does_not_list_is_not_submitted_again(tmp_path):
    m, state = tmp_path / "manifests", tmp_path / "state"
    m.mkdir()
    (m / "unseen.yaml").write_text(RECIPE)
    driver = SlurmDriver(state, user="nobody")  # submits as root, lists nobody's jobs
    c = Controller(m, state, driver, allow_empty=True)  # its one file is deleted at the end
    c.debounce = 0
    jobs: set[str] = set()
    try:
        end = time.monotonic() + PASSES_FOR
        passes = 0
        while time.monotonic() < end:
            c.tick()
            passes += 1
            jobs |= {j for j, _ in c.executor.submitted.jobs.values()}
        assert driver.tally[("sbatch", True)] == 1, (driver.tally, passes)
        (job,) = jobs
        assert _user_of(job) == "root"  # it exists, as another user than the one squeue is asked about
        said = _events(state, "SubmittedJobUnseen")
        assert len(said) == 1 and said[0]["job"] == job, said
        assert "not among the jobs squeue lists for user nobody" in said[0]["message"]
        assert f"scancel {job} to replace it" in said[0]["message"]
        print(f"\n{passes} passes in {PASSES_FOR:g} s: 1 sbatch; {said[0]['message']}")

        # Slurm says it ended: the allocation is submitted again (once)
        scancel(job)
        wait_until(lambda: (c.tick(), driver.tally[("sbatch", True)] == 2)[1], timeout=30,
                   what="the allocation submitted again once its job ended")
        jobs |= {j for j, _ in c.executor.submitted.jobs.values()}
        assert len(jobs) == 2
        (second,) = jobs - {job}

        # the recipe is deleted: its job squeue never listed is cancelled all the same (not orphaned)
        (m / "unseen.yaml").unlink()
        c.tick()
        wait_until(lambda: _user_of(second) == "", timeout=30, what=f"job {second} cancelled")
        assert any(f"cancel job {second}" in e["message"] for e in _events(state, "CancelAlloc"))
        assert driver.tally[("sbatch", True)] == 2
    finally:
        for j in jobs:
            scancel(j)
