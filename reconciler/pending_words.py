"""A pending Slurm job in words: squeue's one-word reason as a sentence, its expected start, how
long it has waited. Pure and a leaf (standard library and timefmt only): `describe` reads a
recorded pending allocation with it without importing the plan (cli/describe_recorded.py);
core/plan/pending.py decides when to ask Slurm again.
"""

from __future__ import annotations

from dataclasses import dataclass

from reconciler.timefmt import iso, span

# squeue's reasons a GPU allocation meets most (man squeue, JOB REASON CODES)
REASONS: dict[str, str] = {
    "Priority": "jobs with a higher priority are ahead of it in the queue",
    "Resources": "the nodes or GPUs it needs are in use; it starts when they free up",
    "AssocGrpGRES": "its account has reached its GPU (GRES) limit; it starts when the account's other jobs end",
    "AssocGrpGRESMinutes": "its account has used up its GPU-minutes",
    "AssocGrpGRESRunMinutes": "its account's running jobs hold all the GPU-minutes it may have at once",
    "AssocMaxGRESPerJob": "it asks for more GPUs than its account allows a job",
    "AssocGrpCpuLimit": "its account has reached its CPU limit",
    "AssocGrpNodeLimit": "its account has reached its node limit",
    "AssocGrpJobsLimit": "its account runs as many jobs as it may",
    "QOSGrpGRES": "its QOS has reached its GPU (GRES) limit",
    "QOSMaxGRESPerUser": "you hold as many GPUs as your QOS allows",
    "QOSMaxJobsPerUserLimit": "you run as many jobs as your QOS allows",
    "ReqNodeNotAvail": "a node it may use is not available (down, drained or reserved)",
    "Reservation": "it waits for its reservation to start",
    "ReservationDeleted": "the reservation it was submitted into no longer exists",
    "BeginTime": "its begin time (--begin) has not come yet",
    "Dependency": "it waits for another job to finish (--dependency)",
    "DependencyNeverSatisfied": "the job it depends on failed: it will never start",
    "JobHeldUser": "held by its user (scontrol release to let it start)",
    "JobHeldAdmin": "held by an administrator",
    "PartitionTimeLimit": "its time limit is longer than the partition allows",
    "PartitionNodeLimit": "it asks for more nodes than the partition allows",
    "PartitionDown": "its partition is down",
    "PartitionInactive": "its partition is inactive",
    "NodeDown": "a node it needs is down",
    "BadConstraints": "no node can satisfy what it asks for",
    "Licenses": "it waits for a license",
    "None": "the scheduler has not looked at it yet",
}


def words(reason: str) -> str:
    """``ReqNodeNotAvail, UnavailableNodes:rnode1`` -> the sentence for ReqNodeNotAvail, with the rest."""
    head, _, rest = reason.partition(",")
    said = REASONS.get(head.strip())
    if said is None:
        return f"Slurm's reason: {reason}" if reason else "Slurm gives no reason"
    return said + (f" ({rest.strip()})" if rest.strip() else "")


@dataclass(frozen=True)
class PendingInfo:
    job: str
    index: int
    reason: str  # Slurm's word
    start: float | None  # Slurm's expected start (squeue --start), None: Slurm has no estimate
    submitted: float | None

    def waited(self, now: float) -> float:
        return max(0.0, now - self.submitted) if self.submitted is not None else 0.0

    def explain(self, now: float) -> str:
        when = ("Slurm has no start estimate yet" if self.start is None
                else f"Slurm expects it to start at {iso(self.start)} (in {span(self.start - now)})"
                if self.start > now else f"Slurm expected it to start at {iso(self.start)}")
        return (f"allocation {self.index} (job {self.job}) pending {span(self.waited(now))}: "
                f"{self.reason or 'no reason'} — {words(self.reason)}; {when}")

    def doc(self, now: float) -> dict:
        return {"job": self.job, "index": self.index, "reason": self.reason, "reasonText": words(self.reason),
                "expectedStart": iso(self.start) if self.start is not None else None,
                "pendingSeconds": round(self.waited(now)), "message": self.explain(now)}
