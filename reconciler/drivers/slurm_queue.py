"""The slow Slurm queries: reservations and the expected start of pending jobs.

argv builders and parsers, pure (golden-tested). They are asked at a slow pace
(shell/cluster/slurm_watch.py), never every tick: Slurm asks tools not to poll it fast.
"""

from __future__ import annotations

import re

import time

from reconciler import hostlist
from reconciler.core.plan.reservations import Reservation

SEP = "\x1f"


def reservations_argv() -> list[str]:
    return ["scontrol", "-o", "show", "reservation"]


def squeue_start_argv(user: str) -> list[str]:
    """Every pending job of the user with Slurm's expected start, in one command; the caller keeps
    the ones it asked about (``-j`` fails outright when one of the ids left the queue meanwhile)."""
    return ["squeue", "--start", "-h", "-t", "PENDING", "-u", user, "-o", SEP.join(["%i", "%S", "%r"])]


def test_only_argv(sbatch: list[str]) -> list[str]:
    """The same submission, asked as a question: Slurm's scheduler says when it would start it (or
    that it never could) and queues nothing."""
    return [sbatch[0], "--test-only", *(a for a in sbatch[1:] if a != "--parsable")]


def parse_test_only(text: str) -> float | None:
    """``sbatch --test-only``'s answer (stderr): "sbatch: Job 4412 to start at 2026-12-05T08:55:41
    using 1 processors on nodes vm in partition debug" -> the epoch; None when it gives no time."""
    m = re.search(r"to start at (\S+)", text)
    return parse_time(m[1]) if m else None


def parse_time(text: str) -> float | None:
    """Slurm's ISO local time (SLURM_TIME_FORMAT=standard) -> epoch; None for N/A, Unknown, (null)."""
    try:
        return time.mktime(time.strptime(text.strip(), "%Y-%m-%dT%H:%M:%S"))
    except (ValueError, OverflowError):
        return None


def _names(text: str | None) -> frozenset[str]:
    return frozenset() if not text or text == "(null)" else frozenset(t for t in text.split(",") if t)


def parse_reservations(text: str) -> list[Reservation]:
    """`scontrol -o show reservation` -> reservations (one per line; fields have no spaces)."""
    out = []
    for line in text.splitlines():
        f = dict(tok.split("=", 1) for tok in line.split() if "=" in tok)
        name, start, end = f.get("ReservationName"), parse_time(f.get("StartTime", "")), parse_time(f.get("EndTime", ""))
        if not name or start is None or end is None:
            continue
        try:
            nodes = frozenset(hostlist.expand(f["Nodes"])) if f.get("Nodes", "(null)") != "(null)" else frozenset()
        except ValueError:
            continue  # a node list we cannot read: not acted on
        out.append(Reservation(name, start, end, nodes, _names(f.get("Users")), _names(f.get("Accounts")),
                               _names(f.get("Flags"))))
    return out


def parse_starts(text: str) -> dict[str, tuple[float | None, str]]:
    out = {}
    for line in text.splitlines():
        f = line.split(SEP)
        if len(f) >= 3:
            out[f[0].strip()] = (parse_time(f[1]), f[2].strip())
    return out
