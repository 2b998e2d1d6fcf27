"""Whether requests ask for workers (core/plan/demand.py), as expectation tables."""

import pytest

from reconciler.core.plan.demand import beyond_canaries, canary_allowance, demand, held_requests


@pytest.mark.parametrize("frontends, since, interval, allowance", [
    (0, 10.0, 1.0, 0.0),  # no frontend: no canary
    (1, 10.0, 1.0, 11.0),  # one per second, and the one in flight
    (2, 10.0, 1.0, 22.0),
    (1, 0.0, 1.0, 1.0),
    (1, 15.0, 5.0, 4.0),
])
def test_the_canaries_allowance(frontends, since, interval, allowance):
    assert canary_allowance(frontends, since, interval) == allowance


@pytest.mark.parametrize("requests, allowance, beyond", [(0, 11, 0), (11, 11, 0), (12, 11, 1), (100, 0, 100)])
def test_requests_beyond_the_canaries(requests, allowance, beyond):
    assert beyond_canaries(requests, allowance) == beyond


@pytest.mark.parametrize("held, received, before, count", [
    (0, 5, None, 0),  # never read before: nothing new
    (2, 5, None, 2),  # held now
    (0, 7, 5, 2),  # two came (and were answered) since the last look
    (1, 7, 5, 2),
    (3, 7, 5, 3),
    (0, 2, 5, 0),  # the count went back (the holder restarted): nothing new
])
def test_requests_at_the_holder(held, received, before, count):
    assert held_requests(held, received, before) == count


@pytest.mark.parametrize("held, through, allowance, targets, wanted", [
    (0, 0, 11, [1], False),
    (0, 11, 11, [1], False),  # only the canaries
    (0, 12, 11, [1], True),  # a client's request through a frontend
    (0, 12, 11, [0, 1], True),  # one role above zero is enough
    (0, 500, 11, [0, 0], False),  # at zero: the frontends' counters are their canary, not clients
    (1, 0, 11, [0, 0], True),  # held at the gateway's holder: always demand
    (1, 0, 11, [2], True),
])
def test_demand(held, through, allowance, targets, wanted):
    assert demand(held, through, allowance, targets) is wanted
