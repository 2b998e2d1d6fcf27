"""A file whose ``name:`` changes is a rename (core/plan/rename.py), as expectation tables: which
rename a file is in, and its step from the facts of a pass."""

import pytest

from reconciler.core.plan.rename import (
    Rename, Step, address_takeable, advance, from_doc, holds_old, new_gateway_shares, new_gateway_takes_over,
    new_gateway_waits, old_gateway_stops, ongoing, why_not_takeable,
)

P = "manifests/app.yaml"
REC = Rename(P, "old", "new", 10.0)
HANDING = Rename(P, "old", "new", 10.0, Step.HANDING_OVER)
NOW = 20.0


OLD = frozenset({"old"})  # the applied names with a last applied spec of their own
NONE = frozenset()


@pytest.mark.parametrize("declared, applied, record, holdable, claimed, want", [
    # the file was applied as `old` and names `new` now: a rename, first seen now
    (("new",), ("old",), None, OLD, frozenset(), ("old", "new", NOW)),
    (("old",), ("old",), None, OLD, frozenset(), None),  # the same name: an edit, no rename
    (("new",), (), None, OLD, frozenset(), None),  # a new file: a create
    (("new",), ("old",), None, NONE, frozenset(), None),  # no last applied spec to hold the old on
    (("new",), ("old",), None, OLD, frozenset({"old"}), None),  # another file names `old` now: it is theirs
    (("a", "b"), ("old",), None, OLD, frozenset(), None),  # a sweep: its names are its values
    (("new",), ("a", "b"), None, OLD, frozenset(), None),  # was a sweep: its variants are deleted
    # a rename in progress
    (("new",), ("new", "old"), REC, OLD, frozenset(), ("old", "new", 10.0)),  # goes on, since kept
    (None, ("new", "old"), REC, OLD, frozenset(), ("old", "new", 10.0)),  # unreadable or being written: held
    (("old",), ("new", "old"), REC, OLD, frozenset(), None),  # renamed back: ended, the new one goes
    (("third",), ("new", "old"), REC, OLD, frozenset(), ("old", "third", NOW)),  # again: old keeps the endpoint
    (("third",), ("new", "old"), REC, OLD, frozenset({"old"}), None),  # and another file took `old`
    (("a", "b"), ("new", "old"), REC, OLD, frozenset(), None),  # became a sweep: no rename
    (None, ("old",), None, OLD, frozenset(), None),  # the first save unreadable: no rename (old held as Invalid)
    # the record lost (removed, set aside as corrupt) mid-rename: files.json still holds both names,
    # the old one held on a spec of its own: found again, never taken for a sweep cut to one name
    (("new",), ("new", "old"), None, frozenset({"new", "old"}), frozenset(), ("old", "new", NOW)),
    (("new",), ("old", "new"), None, frozenset({"new", "old"}), frozenset(), ("old", "new", NOW)),
    (("new",), ("new", "old"), None, frozenset({"new", "old"}), frozenset({"old"}), None),  # another file's now
    (("new",), ("new", "old"), None, frozenset({"new"}), frozenset(), None),  # `old` was a sweep's variant: it goes
    (("new",), ("new", "a", "b"), None, frozenset({"new", "a", "b"}), frozenset(), None),  # more than one: a sweep
])
def test_which_rename_a_file_is_in(declared, applied, record, holdable, claimed, want):
    r = ongoing(P, declared, applied, record, holdable, claimed, NOW)
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


# (step, old held, new gateway waits, old gateway stops, new gateway takes the address, new gateway shares it)
@pytest.mark.parametrize("step, want", [
    (Step.STARTING, (True, True, False, False, False)),
    # both gateways listen; the old deployment still serves
    (Step.HANDING_OVER, (True, False, False, True, True)),
    # the old gateway stops before the deployment it routes to; the new one keeps reuseport until then
    (Step.RETIRING, (True, False, True, False, True)),
    (Step.RELEASED, (False, False, False, False, False)),  # a normal delete of a recipe no file names
])
def test_what_each_step_holds(step, want):
    r = Rename(P, "old", "new", 0.0, step)
    assert (holds_old(r), new_gateway_waits(r), old_gateway_stops(r), new_gateway_takes_over(r),
            new_gateway_shares(r)) == want


def test_a_record_round_trips():
    assert HANDING.doc() == {"old": "old", "new": "new", "since": 10.0, "step": "HandingOver"}


GOOD = {"old": "old", "new": "new", "since": 10.0, "step": "HandingOver"}


@pytest.mark.parametrize("doc, why", [
    (GOOD, None),
    ({**GOOD, "since": 10}, None),  # an int is a time too
    ({**GOOD, "since": "2024-01-01T00:00:00Z"}, "since"),  # a hand's edit: a time as text
    ({**GOOD, "since": [1]}, "since"),
    ({**GOOD, "since": float("inf")}, "since"),  # 1e400 in JSON
    ({**GOOD, "since": float("nan")}, "since"),
    ({**GOOD, "since": True}, "since"),
    ({**GOOD, "since": -1.0}, "since"),
    ({k: v for k, v in GOOD.items() if k != "since"}, "since"),
    ({**GOOD, "step": ["x"]}, "step"),  # unhashable: no crash in the lookup
    ({**GOOD, "step": "Done"}, "step"),
    ({**GOOD, "new": "old"}, "both"),  # would pin the deployment to its last applied spec forever
    ({**GOOD, "old": "../etc"}, "old"),  # no deployment's name
    ({**GOOD, "new": "quarantine.json"}, "new"),  # a name state/ keeps for itself
    ({**GOOD, "new": 3}, "new"),
    ([1], "list"),
])
def test_a_recorded_rename_is_checked_field_by_field(doc, why):
    r = from_doc(P, doc)
    if why is None:
        assert r == Rename(P, "old", "new", 10.0, Step.HANDING_OVER)
    else:
        assert isinstance(r, str) and why in r


@pytest.mark.parametrize("gateway, why", [
    ({"host": "h1", "port": 18123}, None),
    ({"host": "h1", "port": 18123, "mode": "here"}, None),
    ({"host": "h2", "port": 18123}, "on h2"),  # a standby took over on another host (or it was renamed)
    ({"host": "h1", "port": 18123, "mode": "job"}, "Slurm job"),  # reconcile.gateway.allocation
    ({"host": "h1"}, "no gateway address"),
    ({"host": "h1", "port": "18123"}, "no gateway address"),
    ({}, "no gateway address"),
])
def test_whether_the_old_gateways_address_can_be_taken_here(gateway, why):
    got = why_not_takeable(gateway, "h1")
    assert (got is None) if why is None else (why in got)
    assert address_takeable(gateway, "h1") is (why is None)
