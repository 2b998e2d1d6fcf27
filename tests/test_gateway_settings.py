"""reconcile.gateway: validated, bounded, and what the shell gives the gateway's holder."""

from __future__ import annotations

from types import SimpleNamespace as NS

import pytest

from reconciler.errors import RecipeError
from reconciler.shell.gateway.sync import hold_timeout
from support.recipes import builtin_one as recipe



@pytest.mark.parametrize("extra, hold", [
    ("", 10.0),  # the default: the only frontend's relaunch gap is held, not failed
    ("reconcile: {gateway: {hold_seconds: 2.5}}", 2.5),
    ("reconcile: {gateway: {hold_seconds: 0}}", None),  # no holder: a JSON 503 at once
    # scaling to zero holds for its own timeout, whatever the gateway's
    ("reconcile: {gateway: {hold_seconds: 3}, autoscale: {roles: {agg: {min: 0, max: 2, target: "
     "{waiting_per_worker: 2}}}, scale_to_zero_after_seconds: 60, hold_timeout_seconds: 120}}", 120.0),
])
def test_how_long_the_gateway_holds(extra, hold):
    snap = NS(manifests=NS(recipes={"r": recipe(extra)}))
    assert hold_timeout(snap, "r") == hold  # type: ignore[arg-type]
    assert hold_timeout(NS(manifests=NS(recipes={})), "r") is None  # type: ignore[arg-type]


@pytest.mark.parametrize("extra, where, what", [
    ("reconcile: {gateway: {listen: 'login1; x'}}", "reconcile.gateway.listen", "expected an IP address"),
    ("reconcile: {gateway: {listen: example.org}}", "reconcile.gateway.listen", "expected an IP address"),
    ("reconcile: {gateway: {hold_seconds: 7200}}", "reconcile.gateway.hold_seconds", "1800"),
    ("reconcile: {gateway: {hold_seconds: -1}}", "reconcile.gateway.hold_seconds", "0"),
    ("reconcile: {gateway: {holds: 3}}", "reconcile.gateway.holds", ""),
    # YAML's booleans were taken as 1 and 0 by every number of a recipe
    ("reconcile: {gateway: {hold_seconds: true}}", "reconcile.gateway.hold_seconds", "found the boolean true"),
    ("reconcile: {gateway: {hold_seconds: no}}", "reconcile.gateway.hold_seconds", "found the boolean false"),
])
def test_bad_gateway_settings_are_refused_where_they_are(extra, where, what):
    with pytest.raises(RecipeError) as e:
        recipe(extra)
    assert where in str(e.value) and what in str(e.value), str(e.value)


def test_an_ipv6_address_is_written_as_nginx_reads_it():
    assert recipe("reconcile: {gateway: {listen: '::1'}}").reconcile.gateway.listen == "[::1]"
