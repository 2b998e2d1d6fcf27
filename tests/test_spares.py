"""core/plan/spares.py: warm spares' counts and promotion, as expectation tables."""

from __future__ import annotations

import pytest

from reconciler.core.plan.spares import promoted, spare_count, spare_indices


@pytest.mark.parametrize("target, built, warm, most, want", [
    (1, 1, 0, 4, 0),  # no warm: no spare
    (1, 1, 1, 4, 1),  # one serving, one spare
    (1, 1, 2, 4, 2),
    (2, 2, 2, 4, 2),  # 2 serving + 2 spares = max
    (3, 3, 2, 4, 1),  # only one below max
    (4, 4, 1, 4, 0),  # at max: a spare could never be routed
    (1, 2, 2, 3, 1),  # a victim draining (built 2) still holds its place within max
    (0, 0, 1, 4, 0),  # scaled to zero: no spare (the GPUs are released)
    (0, 1, 1, 4, 0),  # going to zero, the last worker draining: no spare either
    (1, 1, 100, 3, 2),  # warm beyond max: what max leaves
])
def test_spare_count(target, built, warm, most, want):
    assert spare_count(target, built, warm, most) == want
    assert built + spare_count(target, built, warm, most) <= max(most, built)


@pytest.mark.parametrize("target, built, warm, most, want", [
    (1, 1, 1, 3, [1]),
    (2, 2, 1, 3, [2]),
    (2, 3, 2, 4, [3]),  # above the draining victim
    (0, 0, 2, 4, []),
])
def test_spare_indices_are_above_the_built_workers(target, built, warm, most, want):
    assert list(spare_indices(target, built, warm, most)) == want


@pytest.mark.parametrize("before, built, want", [
    (range(1, 2), 2, [1]),  # scale-up by one: the spare is routed
    (range(1, 3), 2, [1]),  # two spares, one promoted: the one up longest (lowest index)
    (range(1, 3), 3, [1, 2]),  # scale-up by two: both
    (range(1, 2), 1, []),  # no change: nothing promoted
    (range(2, 3), 1, []),  # scale-down done: the victim (index 1) becomes a spare, none promoted
    (range(0), 3, []),  # no spare before: a cold scale-up
])
def test_promoted(before, built, want):
    assert promoted(before, built) == want


def test_a_scale_up_routes_the_spare_and_starts_one_behind_it():
    """The whole step: 1 serving + 1 spare (index 1); the autoscaler asks for 2 (built 2)."""
    before = spare_indices(1, 1, 1, 4)
    after = spare_indices(2, 2, 1, 4)
    assert promoted(before, 2) == [1]  # routed, no launch
    assert list(after) == [2]  # the replacement, launched behind it


def test_a_scale_down_turns_the_victim_into_the_spare():
    """2 serving + 1 spare at max 3; down to 1: during the drain the spare stays (index 2), then the
    victim (index 1) is the spare and index 2 is stopped."""
    assert list(spare_indices(1, 2, 1, 3)) == [2]  # draining: built is still 2
    assert list(spare_indices(1, 1, 1, 3)) == [1]  # drained: the victim is the spare


def test_scale_to_zero_releases_the_spare_and_the_wake_up_brings_it_back():
    """The autoscaler's own decisions (compute_autoscale) with the spares beside them: idle for the
    whole idle period, the role goes to zero and keeps no spare; a request at the gateway wakes it,
    with its spare."""
    from reconciler.core.plan.autoscale import Load, RoleFacts, compute_autoscale, start
    from reconciler.recipe.autoscale import AutoscaleConfig

    cfg = AutoscaleConfig.model_validate({"roles": {"agg": {"min": 0, "max": 3, "target": {"waiting_per_worker": 4}}},
                                          "scale_to_zero_after_seconds": 60, "warm": 1, "drain_seconds": 0})
    m = start(1, 0.0)
    idle = RoleFacts(1, Load(1))
    assert list(spare_indices(m.target, m.built, cfg.warm, 3)) == [1]
    for t in (10.0, 70.0, 75.0):  # idle: to zero at 70, the last worker drained by 75
        m = compute_autoscale(cfg, {"agg": idle}, {"agg": m}, t)["agg"].memory
    assert (m.target, m.built) == (0, 0)
    assert list(spare_indices(m.target, m.built, cfg.warm, 3)) == []  # nothing held at zero
    m = compute_autoscale(cfg, {"agg": RoleFacts(0, None, demand=True)}, {"agg": m}, 80.0)["agg"].memory
    assert (m.target, m.built) == (1, 1)
    assert list(spare_indices(m.target, m.built, cfg.warm, 3)) == [1]  # woken with its spare
