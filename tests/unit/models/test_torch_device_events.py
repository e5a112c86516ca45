"""`models.torch_device.CudaOps` under a lane, on a fake `torch` that records what it is asked:
the events the host waits on are blocking (the host sleeps on them, not spins a core)."""

from __future__ import annotations

import contextlib
import types
from collections.abc import Iterator
from typing import Any

import numpy as np

from models.staging import Lane
from models.torch_device import CudaOps


class FakeTensor:
    def __init__(self, data: np.ndarray) -> None:
        self.data = data
        self.shape = data.shape

    def to(self, device: Any, non_blocking: bool = False) -> FakeTensor:
        return FakeTensor(self.data.copy())

    def record_stream(self, stream: Any) -> None:
        return None

    def copy_(self, other: FakeTensor, non_blocking: bool = False) -> None:
        np.copyto(self.data, other.data)

    def numpy(self) -> np.ndarray:
        return self.data


def fake_torch(events: list[FakeEvent]) -> types.SimpleNamespace:
    def event(**kwargs: Any) -> FakeEvent:
        made = FakeEvent(kwargs)
        events.append(made)
        return made

    @contextlib.contextmanager
    def stream(s: Any) -> Iterator[None]:
        yield

    cuda = types.SimpleNamespace(Stream=FakeStream, Event=event, stream=stream)
    return types.SimpleNamespace(
        cuda=cuda,
        device=lambda name: name,
        uint8=np.uint8,
        empty=lambda n, dtype, pin_memory: FakeTensor(np.zeros(n, dtype=np.uint8)),
        from_numpy=FakeTensor,
    )


class FakeStream:
    def __init__(self, device: Any) -> None:
        self.device = device

    def wait_event(self, event: FakeEvent) -> None:
        return None


class FakeEvent:
    def __init__(self, kwargs: dict[str, Any]) -> None:
        self.kwargs = kwargs
        self.waited = False

    def record(self, stream: Any) -> None:
        return None

    def synchronize(self) -> None:
        self.waited = True


def test_the_lane_waits_on_blocking_cuda_events() -> None:
    events: list[FakeEvent] = []
    lane = Lane(CudaOps(fake_torch(events)))
    out = lane.run(np.ones((2, 3, 4, 4), dtype=np.float32), lambda x: FakeTensor(x.data * 2.0))
    assert (out == 2.0).all()
    waited = [e for e in events if e.waited]
    assert waited  # the host waited for the batch's copy out
    assert all(e.kwargs.get("blocking") is True for e in events)
