"""A file whose ``name:`` changes is a rename (core/plan/rename.py), as expectation tables: which
rename a file is in, and its step from the facts of a pass."""

import pytest

from reconciler.core.plan.rename import (
    Rename, Step, advance, holds_old, new_gateway_waits, old_gateway_stops, ongoing,
)

P = "manifests/app.yaml"
REC = Rename(P, "old", "new", 10.0)
HANDING = Rename(P, "old", "new", 10.0, Step.HANDING_OVER)
NOW = 20.0


@pytest.mark.parametrize("declared, applied, record, old_spec, claimed, want", [
    # the file was applied as `old` and names `new` now: a rename, first seen now
    (("new",), ("old",), None, True, frozenset(), ("old", "new", NOW)),
    (("old",), ("old",), None, True, frozenset(), None),  # the same name: an edit, no rename
    (("new",), (), None, True, frozenset(), None),  # a new file: a create
    (("new",), ("old",), None, False, frozenset(), None),  # no last applied spec to hold the old on
    (("new",), ("old",), None, True, frozenset({"old"}), None),  # another file names `old` now: it is theirs
    (("a", "b"), ("old",), None, True, frozenset(), None),  # a sweep: its names are its values
    (("new",), ("a", "b"), None, True, frozenset(), None),  # was a sweep: its variants are deleted
    # a rename in progress
    (("new",), ("new", "old"), REC, True, frozenset(), ("old", "new", 10.0)),  # goes on, since kept
    (None, ("new", "old"), REC, True, frozenset(), ("old", "new", 10.0)),  # unreadable or being written: held
    (("old",), ("new", "old"), REC, True, frozenset(), None),  # renamed back: ended, the new one goes
    (("third",), ("new", "old"), REC, True, frozenset(), ("old", "third", NOW)),  # again: old keeps the endpoint
    (("third",), ("new", "old"), REC, True, frozenset({"old"}), None),  # and another file took `old`
    (("a", "b"), ("new", "old"), REC, True, frozenset(), None),  # became a sweep: no rename
    (None, ("old",), None, True, frozenset(), None),  # the first save unreadable: no rename (old held as Invalid)
])
def test_which_rename_a_file_is_in(declared, applied, record, old_spec, claimed, want):
    r = ongoing(P, declared, applied, record, old_spec, claimed, NOW)
    assert (None if r is None else (r.old, r.new, r.since)) == want


@pytest.mark.parametrize("r, ready, frontend, old_endpoint, took, serves, old_runs, step", [
    (REC, False, True, True, False, False, True, Step.STARTING),  # the new one comes up: the old one serves
    (REC, True, True, True, False, False, True, Step.HANDING_OVER),  # Ready: its gateway takes the address
    (HANDING, True, True, True, True, False, True, Step.HANDING_OVER),  # taken, its master not up yet
    (HANDING, False, True, True, True, False, True, Step.HANDING_OVER),  # not Ready for a moment: no step back
    # the new gateway serves the endpoint: the old gateway stops first, its deployment still serving
    # what that gateway carries; once its master is gone the old deployment goes
    (HANDING, True, True, True, True, True, True, Step.RETIRING),
    (HANDING, True, True, False, True, True, True, Step.RETIRING),  # record gone, master finishing
    (HANDING, True, True, False, True, True, False, Step.RELEASED),
    (REC, True, True, False, False, False, False, Step.RELEASED),  # the old had no gateway here: nothing to hand
    (REC, True, False, True, False, False, True, Step.RELEASED),  # the new has no frontend: nothing to take it
    (REC, False, False, False, False, False, False, Step.STARTING),  # but never before the new one is Ready
])
def test_the_step_of_a_rename(r, ready, frontend, old_endpoint, took, serves, old_runs, step):
    got = advance(r, ready, frontend, old_endpoint, took, serves, old_runs)
    assert got.step is step and (got.old, got.new, got.since) == (r.old, r.new, r.since)


@pytest.mark.parametrize("step, held, gateway_waits, old_gateway_stops_", [
    (Step.STARTING, True, True, False),
    (Step.HANDING_OVER, True, False, False),  # both gateways listen; the old deployment still serves
    (Step.RETIRING, True, False, True),  # the old gateway stops before the deployment it routes to
    (Step.RELEASED, False, False, False),  # a normal delete of a recipe no file names
])
def test_what_each_step_holds(step, held, gateway_waits, old_gateway_stops_):
    r = Rename(P, "old", "new", 0.0, step)
    assert (holds_old(r), new_gateway_waits(r), old_gateway_stops(r)) == (held, gateway_waits, old_gateway_stops_)


def test_a_record_round_trips():
    assert HANDING.doc() == {"old": "old", "new": "new", "since": 10.0, "step": "HandingOver"}
