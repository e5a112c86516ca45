"""A hand-driven wall clock for code that takes `clock: Callable[[], float]`."""

from __future__ import annotations


class ManualClock:
    """Returns `now`, which only the test moves (`clock.now += 31`)."""

    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now
