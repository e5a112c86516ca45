"""Open-loop arrival schedule: Poisson arrivals from a seeded generator, so runs can be repeated."""

from __future__ import annotations

import random
from collections.abc import Iterator

__all__ = ["poisson_arrivals"]


def poisson_arrivals(
    rate_per_s: float, *, seed: int, count: int | None = None, duration_s: float | None = None
) -> Iterator[float]:
    """Arrival times of a Poisson process, in seconds from the start.

    Inter-arrival times are exponential with mean ``1 / rate_per_s``. The same seed gives the
    same sequence, scaled by the rate.

    Args:
        rate_per_s: Mean arrivals per second (> 0).
        seed: Seed of the random generator.
        count: Stop after this many arrivals.
        duration_s: Stop before the first arrival at or after this time.

    Raises:
        ValueError: The rate is not positive, or neither ``count`` nor ``duration_s`` is given.
    """
    if not rate_per_s > 0:
        raise ValueError(f"rate must be > 0 per second, got {rate_per_s}")
    if count is None and duration_s is None:
        raise ValueError("give count or duration_s: the schedule must end")
    return _arrivals(rate_per_s, random.Random(seed), count, duration_s)


def _arrivals(
    rate_per_s: float, rng: random.Random, count: int | None, duration_s: float | None
) -> Iterator[float]:
    at_s = 0.0
    sent = 0
    while count is None or sent < count:
        at_s += rng.expovariate(rate_per_s)
        if duration_s is not None and at_s >= duration_s:
            return
        yield at_s
        sent += 1
