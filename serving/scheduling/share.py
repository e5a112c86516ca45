"""Background work's share of the devices and CPU workers: job pages keep `jobs.min_share`.

Interactive work goes first, but strict priority starves a job on a server that interactive
traffic keeps busy: in the simulator's `cpu-c2+job` (two closed-loop clients, so a page is always
queued) a job got 2 pages in an hour, and its other pages ended in 504 four times each and failed.
So the policy keeps account of the device seconds it hands to each class (as the cost model
predicts them when a batch is taken, decayed with a half-life), and while background work has had
less than `min_share` of them, a device takes the most urgent background batch before the
interactive ones. Interactive work then gives up at most about `min_share` of the devices, and
only while a job is waiting for them. The CPU workers' queue (`ShareQueue`) does the same with the
seconds its calls took: on a GPU server the CPU side may be what requests keep busy.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass
from typing import Generic, TypeVar

from serving.scheduling.priorities import BACKGROUND

T = TypeVar("T")

HALF_LIFE_S = 60.0
"""Device seconds handed out this long ago count half: the share is over the last few minutes."""


@dataclass(slots=True)
class BackgroundShare:
    """Decayed device seconds handed to background work, and in all."""

    min_share: float
    """Background's share of device seconds below which it goes first; 0: never (strict
    priority)."""
    half_life_s: float = HALF_LIFE_S
    background_s: float = 0.0
    total_s: float = 0.0
    _at: float | None = None

    def record(self, now: float, seconds: float, background_s: float) -> None:
        """A batch predicted to take `seconds` was taken, `background_s` of them background."""
        self._decay(now)
        self.total_s += seconds
        self.background_s += background_s

    def due(self, now: float) -> bool:
        """Whether background work has had less than its share, so goes first now."""
        if self.min_share <= 0:
            return False
        self._decay(now)
        return self.background_s < self.min_share * self.total_s

    def fraction(self, now: float) -> float:
        """Background's share of the device seconds handed out lately; 0 before any."""
        self._decay(now)
        return self.background_s / self.total_s if self.total_s > 0 else 0.0

    def _decay(self, now: float) -> None:
        if self._at is not None and now > self._at:
            factor = 0.5 ** ((now - self._at) / self.half_life_s)
            self.background_s *= factor
            self.total_s *= factor
        if self._at is None or now > self._at:
            self._at = now


class ShareQueue(Generic[T]):
    """Waiting calls, most urgent first (lower priority, then first come), except that the oldest
    background call goes first while background work has had less than its share."""

    def __init__(self, min_share: float = 0.0) -> None:
        self.share = BackgroundShare(min_share)
        self._urgent: list[tuple[int, int, T]] = []
        self._background: list[tuple[int, int, T]] = []
        self._order = itertools.count()

    def __len__(self) -> int:
        return len(self._urgent) + len(self._background)

    def push(self, item: T, priority: int, *, front: bool = False) -> None:
        """Queue `item`; `front` puts it ahead of everything of its priority (a retry)."""
        order = next(self._order)
        heap = self._background if priority >= BACKGROUND else self._urgent
        heapq.heappush(heap, (priority, -order if front else order, item))

    def pop(self, now: float) -> T | None:
        """The next item to run, or None when none waits."""
        if self._background and (not self._urgent or self.share.due(now)):
            return heapq.heappop(self._background)[2]
        if self._urgent:
            return heapq.heappop(self._urgent)[2]
        return None

    def ran(self, now: float, seconds: float, priority: int) -> None:
        """An item of `priority` took `seconds` of a worker."""
        self.share.record(now, seconds, seconds if priority >= BACKGROUND else 0.0)

    def drain(self) -> list[T]:
        """Remove and return every waiting item."""
        items = [entry[2] for entry in (*self._urgent, *self._background)]
        self._urgent.clear()
        self._background.clear()
        return items
