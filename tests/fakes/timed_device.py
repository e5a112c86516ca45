"""A fake device for `models.staging`: streams as threads whose copies and kernels take time.

Each stream runs its operations in order on its own thread; different streams run at the same
time, as CUDA streams do. Operations record when they start and end, and which batch they touch
(the first value of the batch's data), so tests can assert what overlapped. `gates` lets a test
hold an operation until another has started: a pipelined lane passes, a serial one times out.
"""

from __future__ import annotations

import itertools
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

Op = tuple[str, int]
"""(operation, batch tag): ("upload", 2) is batch 2's copy to the device."""


@dataclass
class FakeEvent:
    done: threading.Event = field(default_factory=threading.Event)

    def synchronize(self) -> None:
        if not self.done.wait(timeout=30):
            raise TimeoutError("fake device event never completed")


@dataclass
class DeviceArray:
    shape: tuple[int, ...]
    data: np.ndarray | None = None
    tag: int = -1
    """The batch it belongs to (its input's first value)."""


class Kernel:
    """A model for the fake device: output shape from the input's, and the math."""

    def __init__(self, fn: Callable[[np.ndarray], np.ndarray]) -> None:
        self.fn = fn

    def out_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(self.fn(np.zeros(shape, dtype=np.float32)).shape)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return self.fn(x)


class FakeStream:
    def __init__(self, device: TimedDevice, name: str) -> None:
        self.name = name
        self.device = device
        self.ops: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._run, daemon=True, name=name)
        self.thread.start()

    def _run(self) -> None:
        while True:
            op = self.ops.get()
            if op is None:
                return
            op()


class TimedDevice:
    """`models.staging.DeviceOps` with timed operations on threads.

    Args:
        copy_s: seconds each copy takes.
        compute_s: seconds each kernel takes.
        gates: op -> op it waits (at most `gate_timeout_s`) to have started before it ends;
            whether it saw it is in `gate_seen`.
    """

    def __init__(
        self,
        *,
        copy_s: float = 0.01,
        compute_s: float = 0.02,
        gates: dict[Op, Op] | None = None,
        gate_timeout_s: float = 5.0,
    ) -> None:
        self.copy_s = copy_s
        self.compute_s = compute_s
        self.gates = gates or {}
        self.gate_timeout_s = gate_timeout_s
        self.gate_seen: dict[Op, bool] = {}
        self.log: list[tuple[str, Op]] = []
        """("start" | "end", op) in the order they happened."""
        self.pinned_allocations = 0
        self._started: dict[Op, threading.Event] = {}
        self._lock = threading.Lock()
        self._names = itertools.count()
        self.streams: list[FakeStream] = []

    def started(self, op: Op) -> threading.Event:
        with self._lock:
            return self._started.setdefault(op, threading.Event())

    def _timed(self, op: Op, seconds: float, work: Callable[[], None]) -> None:
        with self._lock:
            self.log.append(("start", op))
        self.started(op).set()
        time.sleep(seconds)
        work()
        gate = self.gates.get(op)
        if gate is not None:
            self.gate_seen[op] = self.started(gate).wait(self.gate_timeout_s)
        with self._lock:
            self.log.append(("end", op))

    def close(self) -> None:
        for stream in self.streams:
            stream.ops.put(None)

    # DeviceOps
    def new_stream(self) -> FakeStream:
        stream = FakeStream(self, f"stream{next(self._names)}")
        self.streams.append(stream)
        return stream

    def pinned_host(self, nbytes: int) -> np.ndarray:
        self.pinned_allocations += 1
        return np.zeros(nbytes, dtype=np.uint8)

    def record(self, stream: FakeStream) -> FakeEvent:
        event = FakeEvent()
        stream.ops.put(event.done.set)
        return event

    def wait(self, stream: FakeStream, event: FakeEvent) -> None:
        stream.ops.put(event.synchronize)

    def upload(self, host: np.ndarray, stream: FakeStream) -> DeviceArray:
        y = DeviceArray(tuple(host.shape))

        def copy() -> None:
            y.data = host.copy()
            y.tag = _tag(host)

        stream.ops.put(lambda: self._timed(("upload", _tag(host)), self.copy_s, copy))
        return y

    def compute(self, fn: Any, x: DeviceArray, stream: FakeStream) -> DeviceArray:
        y = DeviceArray(fn.out_shape(x.shape))

        def run() -> None:
            if x.data is None:
                raise RuntimeError("kernel ran before its input was copied")
            y.data = fn(x.data)
            y.tag = x.tag

        stream.ops.put(lambda: self._timed(("compute", x.tag), self.compute_s, run))
        return y

    def output_shape(self, y: DeviceArray) -> tuple[int, ...]:
        return y.shape

    def download(self, y: DeviceArray, host: np.ndarray, stream: FakeStream) -> None:
        def copy() -> None:
            if y.data is None:
                raise RuntimeError("copied back before the kernel ran")
            np.copyto(host, y.data)

        stream.ops.put(lambda: self._timed(("download", y.tag), self.copy_s, copy))


def _tag(data: np.ndarray | None) -> int:
    return -1 if data is None or data.size == 0 else int(data.flat[0])
