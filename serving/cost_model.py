"""How long a batch takes on each device: learnt online from measured batch times. No Paddle here.

One estimate per (device, stage, size class), where the size class is the batch's cost (pixels for
det, padded width x rows for rec and cls) rounded to a power of two: seconds per cost unit,
smoothed. A batch of a class never measured on that device is predicted from the device's nearest
measured class of the same stage, scaled by cost. Memory is bounded: a handful of classes per
device and stage.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

ESTIMATE_KEYS = ("device", "stage", "size_class")


def size_class(cost: int) -> int:
    """The cost rounded up to a power of two's exponent: 0 for cost <= 1."""
    return max(0, math.ceil(math.log2(max(cost, 1))))


@dataclass(slots=True)
class _Estimate:
    seconds_per_unit: float
    samples: int = 1


@dataclass(slots=True)
class CostModel:
    """Seconds per batch, per device, stage and size class; seeded by the first batches run."""

    smoothing: float = 0.3
    """Weight of the newest measurement (exponential moving average)."""
    _estimates: dict[tuple[str, str, int], _Estimate] = field(default_factory=dict)

    def observe(self, device: str, stage: str, cost: int, seconds: float) -> None:
        """A batch of `cost` took `seconds` on `device`."""
        key = (device, stage, size_class(cost))
        rate = seconds / max(cost, 1)
        estimate = self._estimates.get(key)
        if estimate is None:
            self._estimates[key] = _Estimate(rate)
        else:
            estimate.seconds_per_unit += self.smoothing * (rate - estimate.seconds_per_unit)
            estimate.samples += 1

    def predict(self, device: str, stage: str, cost: int) -> float | None:
        """Seconds a batch of `cost` should take on `device`; None before any batch of that
        stage ran there."""
        wanted = size_class(cost)
        nearest: tuple[int, _Estimate] | None = None
        for (dev, stg, klass), estimate in self._estimates.items():
            if dev != device or stg != stage:
                continue
            distance = abs(klass - wanted)
            if nearest is None or distance < nearest[0]:
                nearest = (distance, estimate)
        if nearest is None:
            return None
        return nearest[1].seconds_per_unit * max(cost, 1)

    def describe(self) -> list[dict[str, object]]:
        """Every estimate, for `/readyz`: device, stage, size class, seconds per 1,000 units."""
        return [
            {
                "device": device,
                "stage": stage,
                "size_class": f"<= 2^{klass}",
                "ms_per_1000_units": round(estimate.seconds_per_unit * 1e6, 4),
                "samples": estimate.samples,
            }
            for (device, stage, klass), estimate in sorted(self._estimates.items())
        ]

    def rates(self) -> list[tuple[str, str, int, float]]:
        """(device, stage, size class, seconds per unit) for `/metrics`."""
        return [
            (device, stage, klass, estimate.seconds_per_unit)
            for (device, stage, klass), estimate in sorted(self._estimates.items())
        ]
