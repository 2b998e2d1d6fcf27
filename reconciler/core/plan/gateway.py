"""The gateway's timing rules, pure (the shell's gateway wing, shell/gateway/, acts on them).

A gateway keeps no state, so a failed one is started again quickly: at once the first time, then
after a doubling delay capped short (nginx on this host) or at a minute (a gateway in its own Slurm
job: each try is a submission and an event). A gateway that stayed up long enough starts its
backoff over. A gateway job's new config is confirmed by its health page; one not served within
the grace is said once, and looked at less often meanwhile.
"""

from __future__ import annotations

RESTART_BASE_S = 1.0  # after the first (immediate) restart: 1, 2, 4, 8 s
RESTART_CAP_S = 8.0  # nginx on this host
SUBMIT_CAP_S = 60.0  # a gateway job that keeps ending is submitted again at most this often
STAYED_UP_S = 60.0  # a gateway up this long starts its backoff over
CONFIRM_GRACE_S = 10.0  # a config not served this long after it was written is said (GatewayFailed)
LOOK_SOON_S = 0.25  # while a config waits to be confirmed (within the grace), or a job just submitted
LOOK_LATER_S = 5.0  # a job Slurm holds with a reason, a config overdue: looked at again this often


def restart_delay(backoff: int, cap: float = RESTART_CAP_S) -> float:
    """The wait before a restart, ``backoff`` restarts into a run of failures: the first is
    immediate (kubelet-style), then 1, 2, 4 s... capped at ``cap``."""
    return 0.0 if backoff <= 0 else min(RESTART_BASE_S * 2 ** (backoff - 1), cap)


def resubmit_delay(backoff: int) -> float:
    """The wait before submitting a gateway job again after ``backoff`` jobs in a row ended early."""
    return restart_delay(backoff, SUBMIT_CAP_S)


def backoff_after(backoff: int, up_for: float | None) -> int:
    """The backoff a running gateway carries: back to 0 once it stayed up ``STAYED_UP_S``
    (``up_for`` None: not known to have started)."""
    return 0 if up_for is not None and up_for >= STAYED_UP_S else backoff


def confirm_overdue(written_for: float) -> bool:
    """A config written ``written_for`` seconds ago and not served yet is overdue."""
    return written_for >= CONFIRM_GRACE_S


def look_again_in(overdue: bool) -> float:
    """When the loop looks at a gateway job again while its config waits: soon within the grace,
    less often once it is overdue (said once; Slurm or the node is slow)."""
    return LOOK_LATER_S if overdue else LOOK_SOON_S
