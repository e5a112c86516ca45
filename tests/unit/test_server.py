"""The shutdown plan: steps in order, inside the grace."""

from __future__ import annotations

import pytest

from serving.server import ShutdownPlan


@pytest.mark.parametrize("grace_s", [0.0, 0.5, 3.0, 30.0, 600.0])
def test_steps_come_in_order_within_the_grace(grace_s: float) -> None:
    plan = ShutdownPlan.within(grace_s)
    assert 0.0 <= plan.abort_s <= plan.cutoff_s <= plan.kill_s <= grace_s


def test_a_long_grace_goes_mostly_to_requests() -> None:
    plan = ShutdownPlan.within(30.0)
    assert plan == ShutdownPlan(abort_s=24.5, cutoff_s=26.5, kill_s=29.5)
