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
    _estimates: dict[tuple[str, str], dict[int, _Estimate]] = field(default_factory=dict)
    """(device, stage) -> size class -> estimate: a lookup reads one device's few classes."""

    def observe(self, device: str, stage: str, cost: int, seconds: float) -> None:
        """A batch of `cost` took `seconds` on `device`."""
        classes = self._estimates.setdefault((device, stage), {})
        klass = size_class(cost)
        rate = seconds / max(cost, 1)
        estimate = classes.get(klass)
        if estimate is None:
            classes[klass] = _Estimate(rate)
        else:
            estimate.seconds_per_unit += self.smoothing * (rate - estimate.seconds_per_unit)
            estimate.samples += 1

    def predict(self, device: str, stage: str, cost: int) -> float | None:
        """Seconds a batch of `cost` should take on `device`; None before any batch of that
        stage ran there."""
        classes = self._estimates.get((device, stage))
        if not classes:
            return None
        wanted = size_class(cost)
        estimate = classes.get(wanted)
        if estimate is None:
            estimate = classes[min(classes, key=lambda klass: abs(klass - wanted))]
        return estimate.seconds_per_unit * max(cost, 1)

    def _items(self) -> list[tuple[str, str, int, _Estimate]]:
        return sorted(
            (device, stage, klass, estimate)
            for (device, stage), classes in self._estimates.items()
            for klass, estimate in classes.items()
        )

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
            for device, stage, klass, estimate in self._items()
        ]
