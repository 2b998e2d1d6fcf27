"""reconcile.liveness_failures and liveness_seconds: bounded where they are written, and carried
into the desired state the plan judges with (core/plan/stop.py:dead; its expectation rows are in
tests/core/test_policies.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.core.ports import NodePortAllocator
from reconciler.desired.build import build_recipe
from reconciler.errors import RecipeError
from support.recipes import builtin_one as recipe


@pytest.mark.parametrize("extra, failures, seconds", [
    ("", 3, 10.0),  # defaults: three failures in a row, the first at least 10 s old
    ("reconcile: {liveness_failures: 2, liveness_seconds: 0}", 2, 0.0),  # 0: the count alone
    ("reconcile: {liveness_seconds: 45.5}", 3, 45.5),
])
def test_the_desired_state_carries_them(extra, failures, seconds):
    d = build_recipe(recipe(extra), [], NodePortAllocator(), Path("/state"), "python3")
    assert (d.liveness_failures, d.liveness_seconds) == (failures, seconds)


@pytest.mark.parametrize("extra, what", [
    ("reconcile: {liveness_seconds: -1}", "greater than or equal to 0"),
    ("reconcile: {liveness_seconds: 3601}", "less than or equal to 3600"),
    ("reconcile: {liveness_seconds: true}", "found the boolean true"),
    ("reconcile: {liveness_failures: 0}", "greater than or equal to 1"),
    ("reconcile: {liveness_failures: 1001}", "less than or equal to 1000"),
])
def test_out_of_bounds_values_are_refused_where_they_are(extra, what):
    with pytest.raises(RecipeError) as e:
        recipe(extra)
    where = "reconcile." + extra.split("{", 1)[1].split(":", 1)[0].strip()
    assert where in str(e.value) and what in str(e.value), str(e.value)
