"""The gateway's timing rules (core/plan/gateway.py), as expectation tables."""

import pytest

from reconciler.core.plan.gateway import (
    CONFIRM_GRACE_S, LOOK_LATER_S, LOOK_SOON_S, STAYED_UP_S, backoff_after, confirm_overdue, look_again_in,
    restart_delay, resubmit_delay,
)


@pytest.mark.parametrize("backoff, delay", [(-1, 0), (0, 0), (1, 1), (2, 2), (3, 4), (4, 8), (5, 8), (6, 8), (30, 8)])
def test_a_restart_is_immediate_then_doubles_capped_short(backoff, delay):
    assert restart_delay(backoff) == delay


@pytest.mark.parametrize("backoff, delay", [(0, 0), (1, 1), (2, 2), (3, 4), (7, 60), (8, 60), (20, 60)])
def test_a_job_is_resubmitted_at_once_then_doubling_capped_at_a_minute(backoff, delay):
    assert resubmit_delay(backoff) == delay


@pytest.mark.parametrize("backoff, up_for, kept", [
    (3, None, 3),  # not known to have started: kept
    (3, 0.0, 3),
    (3, STAYED_UP_S - 0.1, 3),  # not long enough
    (3, STAYED_UP_S, 0),  # stayed up: the next failure restarts at once
    (3, 3600.0, 0),
    (0, 3600.0, 0),
])
def test_a_gateway_that_stayed_up_starts_its_backoff_over(backoff, up_for, kept):
    assert backoff_after(backoff, up_for) == kept


@pytest.mark.parametrize("written_for, overdue, look", [
    (0.0, False, LOOK_SOON_S),
    (CONFIRM_GRACE_S - 0.01, False, LOOK_SOON_S),
    (CONFIRM_GRACE_S, True, LOOK_LATER_S),  # said once (GatewayFailed), looked at less often
    (600.0, True, LOOK_LATER_S),
])
def test_a_config_not_served_within_the_grace_is_overdue(written_for, overdue, look):
    assert confirm_overdue(written_for) is overdue
    assert look_again_in(confirm_overdue(written_for)) == look
