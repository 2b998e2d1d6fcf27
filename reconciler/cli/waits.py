"""What recipes wait on Slurm for, in words: ``plan`` and ``get`` say it instead of "nothing to do".

A recipe waits for an allocation when some of its units do (``WaitReason.ALLOCATION_PENDING``);
the reason is Slurm's own (squeue's Reason of its queued jobs: Resources, Priority, ...).
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # `get` from run's record prints summary() and imports no plan
    from reconciler.core.plan.results import Plan
    from reconciler.world import Observed


def allocation_waits(p: Plan, observed: Observed) -> dict[str, str]:
    """recipe -> Slurm's reasons for its queued allocations ("Resources"; "" when Slurm gives none)."""
    from reconciler.core.plan.results import WaitReason

    out: dict[str, str] = {}
    for name, rp in p.recipes.items():
        if not any(w.reason is WaitReason.ALLOCATION_PENDING for w in rp.waiting.values()):
            continue
        reasons = sorted({a.reason for a in observed.allocs_of(name)
                          if a.live and not a.running and a.reason and a.reason != "None"})
        out[name] = ", ".join(reasons)
    return out


def summary(waits: dict[str, str]) -> str:
    """'6 recipes wait for an allocation (Resources: 4, Priority: 2)'; '' when none waits."""
    if not waits:
        return ""
    n = len(waits)
    reasons = Counter(r for why in waits.values() for r in why.split(", ") if r)
    why = ", ".join(r if len(reasons) == 1 else f"{r}: {k}" for r, k in reasons.most_common())
    return (f"{n} recipe{'s' if n != 1 else ''} wait{'s' if n == 1 else ''} for an allocation"
            + (f" ({why})" if why else ""))
