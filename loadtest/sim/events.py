"""The simulator's virtual clock: a heap of timed callbacks, run in time order, never slept on."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from typing import Any

Callback = Callable[[Any], None]


class EventLoop:
    """Discrete events: `at(t, fn, arg)` runs `fn(arg)` when the clock reaches `t`.

    Events at the same time run in the order they were scheduled. `now` is the only clock the
    simulated server reads.
    """

    __slots__ = ("_heap", "_seq", "events", "now")

    def __init__(self) -> None:
        self.now = 0.0
        self.events = 0
        self._heap: list[tuple[float, int, Callback, Any]] = []
        self._seq = itertools.count()

    def at(self, t: float, fn: Callback, arg: Any = None) -> None:
        """Run `fn(arg)` at time `t` (not before `now`)."""
        heapq.heappush(self._heap, (max(t, self.now), next(self._seq), fn, arg))

    def soon(self, fn: Callback, arg: Any = None) -> None:
        """Run `fn(arg)` at the current time, after what is already scheduled for it."""
        heapq.heappush(self._heap, (self.now, next(self._seq), fn, arg))

    def clock(self) -> float:
        """The current time (for `Admission.clock`)."""
        return self.now

    def run(self, until: float) -> None:
        """Run events up to and including time `until`; the clock ends at `until` or at the last
        event if the heap empties first."""
        heap = self._heap
        pop = heapq.heappop
        while heap and heap[0][0] <= until:
            t, _, fn, arg = pop(heap)
            self.now = t
            self.events += 1
            fn(arg)
        if not heap:
            return
        self.now = until

    @property
    def pending(self) -> int:
        """Events still scheduled."""
        return len(self._heap)
