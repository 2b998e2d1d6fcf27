"""Allocations that follow one another at one index: a hand-over before the time limit. Pure.

An allocation index may be held by more than one live Slurm job: the *successor* the
plan submitted when the running job's time was running out (``plan/allocations.py``),
or a duplicate left by a crash between ``sbatch`` and bookkeeping. Per index:

- the *current* job is the newest RUNNING one (else the oldest live one): workers are
  placed there, so once a successor runs, every worker moves onto it — as a rollout,
  with surge (``plan/rollout.py``): the new life starts there and the old one stops
  once the new one is Ready and routed;
- newer jobs not running yet are *successors*: kept, waited for;
- older jobs still carrying our steps are *retiring*: kept until their last step is
  gone, then released. Without steps they are released at once.
"""

from __future__ import annotations

from collections.abc import Iterable

from reconciler.world import Alloc, Step


def job_order(job_id: str) -> tuple[int, str]:
    head = job_id.split("_")[0]
    return (int(head), job_id) if head.isdigit() else (1 << 62, job_id)


def generations(live: Iterable[Alloc], steps: Iterable[Step]) -> tuple[list[Alloc], dict[int, list[str]], list[str]]:
    """(the current job per index, successor job ids per index, retiring job ids)."""
    by_index: dict[int, list[Alloc]] = {}
    for a in sorted(live, key=lambda a: job_order(a.job_id)):
        by_index.setdefault(a.index, []).append(a)
    busy = {s.job_id for s in steps}
    current: list[Alloc] = []
    successors: dict[int, list[str]] = {}
    retiring: list[str] = []
    for index, jobs in sorted(by_index.items()):
        running = [a for a in jobs if a.running]
        cur = running[-1] if running else jobs[0]
        current.append(cur)
        after = False
        for a in jobs:
            if a is cur:
                after = True
            elif after:
                successors.setdefault(index, []).append(a.job_id)
            elif a.job_id in busy:
                retiring.append(a.job_id)
    return current, successors, retiring
