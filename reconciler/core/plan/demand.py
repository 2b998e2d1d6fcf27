"""Whether a deployment's requests ask for workers, from counters the autoscaler read (pure).

The reconciler's own readiness canaries go through the frontends to the engines: they are
counted by the same counters as a client's requests, so the canaries of the time since the last
look are taken off first. A request held at the gateway's holder (scale to zero) is demand
whatever else is true; one through the frontends is demand unless the deployment is at zero, where
the frontends' counters are their canary trying a router with no worker left (a client's request
then fails over to the holder, which counts it).
"""

from __future__ import annotations

from collections.abc import Iterable


def canary_allowance(frontends: int, since: float, canary_interval: float) -> float:
    """The requests ``frontends`` frontends' canaries made in ``since`` seconds: one per interval
    each, and the one in flight."""
    return frontends * (since / canary_interval + 1)


def beyond_canaries(requests: float, allowance: float) -> float:
    """Requests counted beyond the canaries' allowance (never below zero)."""
    return max(0.0, requests - allowance)


def held_requests(held: int, received: int, received_before: int | None) -> int:
    """Requests at the holder now, or that came to it since the last look (``received`` is its
    running count; a request already answered 503 still asked for the deployment). A count that
    went back (the holder restarted) or was never read before says nothing new."""
    came = received - received_before if received_before is not None and received >= received_before else 0
    return max(held, came)


def demand(held: int, through_frontends: float, allowance: float, targets: Iterable[int]) -> bool:
    """A request asks for workers: one held at the holder, or more requests through the frontends
    than their canaries make while some role's target is above zero."""
    at_zero = all(t == 0 for t in targets)
    return held > 0 or (through_frontends > allowance and not at_zero)
