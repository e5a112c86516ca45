"""Placement by expected finish time: a device takes a batch only if no other finishes it sooner.

With unlike devices (a GPU and the CPU), plain work pulling lets an idle CPU take a detection batch
the GPU would finish many times sooner, and adding a device can make the server slower. Here the
device asking for work compares when it would finish a batch (its own batches in flight, then
this one, from the cost model) with when the best other device serving that stage would, counting
that device's batches in flight and the queued work the asking device has already left to it. If
another would finish first, it leaves the batch and looks
again when that device frees (or when anything changes); it takes work that suits it instead,
such as small recognition batches. A device that has never run a stage takes its batch (that is
how it is measured), and with one device nothing is ever left. Pure: time is passed in.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from serving.scheduling.cost_model import CostModel


@dataclass(slots=True)
class _Running:
    started_at: float
    predicted_s: float


@dataclass(slots=True)
class Placement:
    """The devices, the batches each holds, and the cost model that predicts them."""

    model: CostModel = field(default_factory=CostModel)
    _stages: dict[str, frozenset[str]] = field(default_factory=dict)
    _down: set[str] = field(default_factory=set)
    """Devices not taking work now (restarting): nothing is left to them."""
    _running: dict[str, dict[int, _Running]] = field(default_factory=dict)
    _ids: itertools.count[int] = field(default_factory=itertools.count)

    def add_device(self, device: str, stages: Iterable[str]) -> None:
        """Make `device` (a worker's unique name) a candidate for `stages`."""
        self._stages[device] = frozenset(stages)
        self._running.setdefault(device, {})

    def set_available(self, device: str, available: bool) -> None:
        """Whether `device` takes work: a restarting worker is left nothing to do meanwhile."""
        if available:
            self._down.discard(device)
        else:
            self._down.add(device)

    def idle(self, devices: Iterable[str]) -> bool:
        """Whether none of `devices` holds a batch."""
        return not any(self._running.get(device) for device in devices)

    def free_at(self, device: str, now: float) -> float:
        """When `device` should have finished every batch it holds."""
        running = self._running.get(device)
        if not running:
            return now
        first_started = min(r.started_at for r in running.values())
        total = sum(r.predicted_s for r in running.values())
        return max(now, first_started + total)

    def free_times(self, now: float) -> dict[str, float]:
        """`free_at` of every device, as one snapshot for the many `leave_until` calls of a
        selection (nothing starts or finishes during one)."""
        return {device: self.free_at(device, now) for device in self._stages}

    def leave_until(
        self,
        device: str,
        stage: str,
        cost: int,
        now: float,
        ahead: int = 0,
        *,
        free: Mapping[str, float] | None = None,
    ) -> float | None:
        """None: `device` should take this batch. Else the time at which the device that would
        finish it sooner should free: `device` looks again then, or when anything changes (a
        time already past means: only when something changes, never a busy loop).

        `ahead` is the cost of queued work of this stage another device would run first: the
        other device's queue, besides the batches it holds. `free` is a `free_times` snapshot.
        """
        mine = self.model.predict(device, stage, cost)
        if mine is None:
            return None
        if free is None:
            free = self.free_times(now)
        my_finish = free.get(device, now) + mine
        best: tuple[float, float] | None = None
        for other, stages in self._stages.items():
            if other == device or stage not in stages or other in self._down:
                continue
            theirs = self.model.predict(other, stage, cost + ahead)
            if theirs is None:
                continue
            other_free = free.get(other, now)
            finish = other_free + theirs
            if finish < my_finish and (best is None or finish < best[0]):
                best = (finish, other_free)
        return None if best is None else best[1]

    def started(self, device: str, stage: str, cost: int, now: float) -> int:
        """`device` took a batch; returns a token for `finished`."""
        token = next(self._ids)
        predicted = self.model.predict(device, stage, cost) or 0.0
        self._running.setdefault(device, {})[token] = _Running(now, predicted)
        return token

    def finished(
        self, device: str, token: int, stage: str, cost: int, seconds: float | None
    ) -> None:
        """The batch of `token` ended; `seconds` is its measured time, None if it failed."""
        self._running.get(device, {}).pop(token, None)
        if seconds is not None:
            self.model.observe(device, stage, cost, seconds)
