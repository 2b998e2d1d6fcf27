"""What the autoscale tests share: a heavy client, the load they put on a recipe (one light client
and several heavy ones), and a fake cluster driven to a fixpoint at a given Scale."""

from __future__ import annotations

from pathlib import Path

from fakes import FakeCluster
from reconciler.desired.build import build
from reconciler.world import Observed
from support.clients import Client, stop


def Heavy(endpoint: str, limit: int) -> Client:
    """A client whose requests take a while (so that they queue behind max_num_seqs)."""
    return Client(endpoint, limit=limit, max_tokens=60, timeout=30)


class Load:
    """A light client (many short requests, kept through a scale-down) and ``heavy`` slow ones
    (a queue behind max_num_seqs) through one endpoint; every one stopped when the block ends."""

    def __init__(self, endpoint: str, heavy: int):
        self.light = Client(endpoint, limit=20000)
        self.heavy = [Heavy(endpoint, limit=2000) for _ in range(heavy)]

    def __enter__(self) -> Load:
        for c in (self.light, *self.heavy):
            c.start()
        return self

    def end(self) -> None:
        """The load goes: the heavy clients stop; the light one keeps sending."""
        stop(*self.heavy)

    def __exit__(self, *exc) -> None:
        stop(self.light, *self.heavy)


def converge(c: FakeCluster, r, scale):
    for _ in range(40):
        d = build({"r": r}, Observed(tuple(c.allocs.values()), tuple(c.steps.values())), c.ports, Path("/state"),
                  "py", 1, scale=scale)
        from reconciler.core.plan import plan

        p = plan(d, c.observed(d), 0.0)
        if not p.actions:
            return d.recipes["r"]
        c.apply(p)
    raise AssertionError("no fixpoint")
