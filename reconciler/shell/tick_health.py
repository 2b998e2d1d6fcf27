"""A tick that fails is said where operators look: a condition on every deployment, one event per
episode (not one per retry), and, once ticks go through again, one event saying so.

Serving goes on while ticks fail (nothing is cancelled by a tick that did not run), so the
condition is informational: ``TickFailing`` with reason ``SlurmUnreachable`` when Slurm's
commands failed, ``StateUnwritable`` when the state directory refused a write, ``TickError``
otherwise. Every write here is best-effort: the state directory may be what is failing.
"""

from __future__ import annotations

import errno

import structlog

from reconciler.drivers import DriverError
from reconciler.drivers.state import StateDir
from reconciler.timefmt import iso

log = structlog.get_logger("reconciler")
CONDITION = "TickFailing"


def reason_of(e: BaseException) -> str:
    if isinstance(e, DriverError):
        return "SlurmUnreachable"
    if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES):
        return "StateUnwritable"
    return "TickError"


class TickHealth:
    def __init__(self, state: StateDir):
        self.state = state
        self.failing_since: float | None = None
        self.error = ""

    def failed(self, e: BaseException, failures: int, now: float) -> None:
        error = f"{type(e).__name__}: {e}"
        reason = reason_of(e)
        first = self.failing_since is None
        if first:
            self.failing_since = now
        self.error = error
        msg = f"reconcile passes fail ({failures} in a row since {iso(self.failing_since)}): {error}; " \
              "what runs is left as it is"
        try:
            if first:  # once per episode: a retry every few seconds is not news
                self.state.event(CONDITION, None, msg, reason=reason)
            for name in self.state.known_recipes():
                st = self.state.status(name)
                if not st or st.get("phase") == "Deleted":
                    continue
                conds = [c for c in st.get("conditions", []) if c.get("type") != CONDITION]
                conds.append({"type": CONDITION, "status": "True", "reason": reason, "message": msg,
                              "lastTransitionTime": iso(self.failing_since)})
                self.state.write_status(name, {**st, "conditions": conds})
        except OSError as w:
            log.error("cannot record the failing tick in state/", error=str(w))

    def succeeded(self, now: float) -> None:
        if self.failing_since is None:
            return
        since, self.failing_since = self.failing_since, None
        try:
            self.state.event("TickRecovered", None, f"reconcile passes go through again after {now - since:.0f}s "
                             f"of failures (last: {self.error})")
        except OSError as w:
            log.error("cannot record the recovered tick in state/", error=str(w))
