"""reasons.keep_refusal: a unit refused for the recipe's or the config's own reason keeps its
ConfigError while its next life (same spec, refused again) is launching, instead of `get`
flickering between ConfigError and "-" at every relaunch; a Ready life or a changed spec clears it."""

from __future__ import annotations

import pytest

from reconciler.core.refusal import WORD
from reconciler.shell.reasons import keep_refusal

REFUSED = {"name": "agg_0", "reason": WORD, "message": "srun: unrecognized option '--container-image=x'",
           "specHash": "aaa", "ready": False, "steps": []}


def row(**kw) -> dict:
    return {"name": "agg_0", "reason": None, "message": None, "specHash": "aaa", "ready": False,
            "steps": ["12.0"], **kw}


@pytest.mark.parametrize("now, prev, kept", [
    (row(), REFUSED, True),  # relaunched with the refused spec: still the config's fault
    (row(ready=True), REFUSED, False),  # the life came up: nothing to say any more
    (row(specHash="bbb"), REFUSED, False),  # the spec changed (fixed): a new start, no old verdict
    (row(steps=[]), REFUSED, False),  # no life launching: the row's own reason (or none) stands
    (row(), {**REFUSED, "reason": "CrashLoopBackOff"}, False),  # only a refusal is carried
    (row(reason="Killed", message="exited 137"), REFUSED, False),  # a reason of its own wins
    (row(name="agg_1"), REFUSED, False),  # another unit's verdict is not this one's
])
def test_keep_refusal(now, prev, kept):
    rows = [now]
    before = (now["reason"], now["message"])
    keep_refusal(rows, [prev])
    got = (rows[0]["reason"], rows[0]["message"])
    assert got == ((WORD, REFUSED["message"]) if kept else before)
