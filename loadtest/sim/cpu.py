"""Simulated CPU side: the CPU worker pool and the cores it may share with CPU devices.

Mirrors `serving.workers.cpu_pool.CpuPool`: each worker runs one call at a time, fed from its
`ShareQueue` (priority, then first come; background first while below its share); a call whose
request has ended (answered, timed out, cancelled) is skipped when it reaches the head, and one
already running finishes and its result is discarded.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from loadtest.sim.events import EventLoop
from loadtest.sim.model import CpuModel, HostModel, lognormal_factor
from loadtest.sim.stats import Recorder
from serving.scheduling.share import ShareQueue


class Preemptible(Protocol):
    """A CPU device computing on the host's cores: CPU-worker calls can slow it down."""

    @property
    def threads(self) -> int:
        """Cores its math threads use."""

    def delay(self, seconds: float) -> None:
        """Push back the end of everything it is computing by `seconds`."""


@dataclass(slots=True)
class HostLoad:
    """Threads that want the host's cores: busy CPU workers and computing CPU devices.

    With more threads than cores, a CPU-worker call runs at full speed and the CPU device
    computing meanwhile loses the core it takes: its batch ends `seconds / threads` later (one
    thread of its `threads` stalled for the call's time; a fair share, simplified).
    """

    host: HostModel
    workers_busy: int = 0
    computing: list[Preemptible] = field(default_factory=list)
    _call_ends: dict[int, float] = field(default_factory=dict)

    @property
    def device_threads(self) -> int:
        """Threads of the devices computing now."""
        return sum(device.threads for device in self.computing)

    def _over(self) -> int:
        cores = self.host.cores
        if cores is None:
            return 0
        return max(0, self.workers_busy + self.device_threads - cores)

    def call_started(self, key: int, now: float, seconds: float) -> None:
        """A CPU-worker call of `seconds` started."""
        self.workers_busy += 1
        self._call_ends[key] = now + seconds
        over = min(1, self._over())
        if over and self.computing:
            share = seconds / len(self.computing)
            for device in self.computing:
                device.delay(share / device.threads)

    def call_ended(self, key: int) -> None:
        """The call of `key` ended."""
        self.workers_busy -= 1
        self._call_ends.pop(key, None)

    def device_started(self, device: Preemptible, now: float) -> None:
        """`device` starts computing: calls already running take their cores from it."""
        self.computing.append(device)
        over = self._over()
        if over and self.workers_busy:
            remaining = sum(max(0.0, end - now) for end in self._call_ends.values())
            device.delay(remaining * min(1.0, over / self.workers_busy) / device.threads)

    def device_stopped(self, device: Preemptible) -> None:
        """`device` has nothing left to compute."""
        self.computing.remove(device)


class Alive(Protocol):
    """What a CPU call belongs to: the call runs only while `status` is None."""

    status: str | None


@dataclass(slots=True, eq=False)
class _Call:
    owner: Alive
    seconds: float
    done: Callable[[Any], None]
    arg: Any
    priority: int


@dataclass(slots=True)
class CpuPoolSim:
    """N single-threaded workers running modelled calls."""

    loop: EventLoop
    model: CpuModel
    load: HostLoad
    rng: random.Random
    recorder: Recorder
    calls: int = 0
    skipped: int = 0
    """Calls dropped from the queue because their request had ended."""
    background_share: float = 0.0
    """`jobs.min_share`."""
    _queue: ShareQueue[_Call] = field(init=False)
    _idle: int = 0

    def __post_init__(self) -> None:
        self._idle = self.model.workers
        self._queue = ShareQueue(self.background_share)

    @property
    def queued(self) -> int:
        """Calls waiting for a worker."""
        return len(self._queue)

    def run(
        self, owner: Alive, seconds: float, priority: int, done: Callable[[Any], None], arg: Any
    ) -> None:
        """Queue a call of `seconds`; `done(arg)` runs when it ends, if `owner` is still alive."""
        key = priority if self.model.priority else 0
        self._queue.push(_Call(owner, seconds, done, arg, key), key)
        if self._idle:
            self._next()

    def _next(self) -> None:
        while self._idle and (call := self._queue.pop(self.loop.now)) is not None:
            if call.owner.status is not None:
                self.skipped += 1
                continue
            self._idle -= 1
            factor = lognormal_factor(self.rng.gauss(0.0, 1.0), self.model.jitter)
            seconds = call.seconds * factor
            self.load.call_started(id(call), self.loop.now, seconds)
            self.recorder.cpu_call(self.loop.now, seconds)
            self.calls += 1
            call.seconds = seconds
            self.loop.at(self.loop.now + seconds, self._ended, call)

    def _ended(self, call: _Call) -> None:
        self._idle += 1
        self._queue.ran(self.loop.now, call.seconds, call.priority)
        self.load.call_ended(id(call))
        if call.owner.status is None:
            call.done(call.arg)
        self._next()
