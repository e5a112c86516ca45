"""A fake of the parts of Paddle's GPU build that `models.gpu_predictor` uses: streams, events,
stream guards, pinned memory, tensors and their copies, a few operators, and predictors.

Work runs when it is issued (a fake has no device); every call is logged with the stream that
was current, so tests check which stream each copy and kernel was issued on, in which order,
and whether anything waited. Tensors hold numpy arrays: a CPU tensor made from a numpy array
shares its memory, as DLPack does.
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tests.fakes.paddle_inference import Call, Precision, make_config_class


@dataclass
class Log:
    """What the fake was asked, in order: (name, details) with details["stream"] the stream
    that was current (None outside any guard)."""

    calls: list[Call] = field(default_factory=list)
    current: str | None = None
    pinned: list[np.ndarray] = field(default_factory=list)
    predictors: list[FakePredictor] = field(default_factory=list)

    def add(self, call: str, **details: Any) -> None:
        self.calls.append((call, {"stream": self.current, **details}))

    def named(self, name: str) -> list[dict[str, Any]]:
        return [details for call, details in self.calls if call == name]

    def names(self) -> list[str]:
        return [call for call, _ in self.calls]

    def is_pinned(self, array: np.ndarray) -> bool:
        return any(np.shares_memory(array, block) for block in self.pinned)


class FakeTensor:
    def __init__(self, log: Log, data: np.ndarray, place: str) -> None:
        self._log = log
        self.data = data
        self.place = place

    @property
    def shape(self) -> list[int]:
        return list(self.data.shape)

    @property
    def dtype(self) -> str:
        return str(self.data.dtype)

    def data_ptr(self) -> int:
        return int(self.data.ctypes.data)

    def cuda(self, device_id: int | None = None, blocking: bool = True) -> FakeTensor:
        self._log.add("Tensor.cuda", device_id=device_id, blocking=blocking, source=self.data)
        return FakeTensor(self._log, self.data.copy(), f"gpu:{device_id}")

    def copy_(self, src: FakeTensor, blocking: bool) -> None:
        self._log.add("Tensor.copy_", blocking=blocking, source=src.data, target=self.data)
        np.copyto(self.data, src.data)

    def clone(self) -> FakeTensor:
        self._log.add("Tensor.clone")
        return FakeTensor(self._log, self.data.copy(), self.place)

    def astype(self, dtype: str) -> FakeTensor:
        self._log.add("Tensor.astype", dtype=dtype)
        return FakeTensor(self._log, self.data.astype(dtype), self.place)


class FakePredictor:
    """A model whose output depends on its input, written into the same array every run
    (the tensors Paddle's `run()` returns alias the predictor's memory)."""

    def __init__(self, log: Log, classes: int) -> None:
        self._log = log
        self._classes = classes
        self.memory = np.zeros(0, dtype=np.float32)

    def run(self, inputs: list[FakeTensor]) -> list[FakeTensor]:
        (x,) = inputs
        self._log.add("Predictor.run", place=x.place, shape=tuple(x.data.shape))
        rows = x.data.shape[0]
        seeds = x.data.reshape(rows, -1).sum(axis=1)
        out = np.stack(
            [
                np.random.default_rng(abs(int(seed)) % 997).random((4, self._classes))
                for seed in seeds
            ]
        ).astype(np.float32)
        if self.memory.shape != out.shape:
            self.memory = np.empty_like(out)
        np.copyto(self.memory, out)
        return [FakeTensor(self._log, self.memory, x.place)]


def make_fake_paddle(log: Log, *, cuda_build: bool = True, classes: int = 9) -> types.ModuleType:
    """A `paddle` module for `models.gpu_predictor`, logging into `log`."""
    config_class = make_config_class(log.calls)
    if cuda_build:

        def set_exec_stream(self: Any, stream: Any) -> None:
            log.add("set_exec_stream", exec_stream=stream)

        config_class.set_exec_stream = set_exec_stream  # type: ignore[attr-defined]

    def create_predictor(config: Any) -> FakePredictor:
        log.add("create_predictor")
        predictor = FakePredictor(log, classes)
        log.predictors.append(predictor)
        return predictor

    inference = types.SimpleNamespace(
        Config=config_class,
        PrecisionType=Precision,
        get_version=lambda: "version: 3.2.2",
        create_predictor=create_predictor,
    )

    class Event:
        def __init__(self, device: str | None = None, *, blocking: bool = False) -> None:
            self.stream = ""
            self.blocking = blocking

        def synchronize(self) -> None:
            log.add("Event.synchronize", recorded_on=self.stream, blocking=self.blocking)

    class Stream:
        made = 0

        def __init__(self, device: str | None = None) -> None:
            Stream.made += 1
            self.name = f"{device}/stream{Stream.made}"
            self.stream_base = f"base:{self.name}"
            log.add("Stream", device=device, made=self.name)

        def record_event(self, event: Event | None = None) -> Event:
            log.add("Stream.record_event", on=self.name)
            event = event if event is not None else Event()
            event.stream = self.name
            return event

        def wait_event(self, event: Event) -> None:
            log.add("Stream.wait_event", on=self.name, recorded_on=event.stream)

    @contextlib.contextmanager
    def stream_guard(stream: Stream) -> Iterator[None]:
        outer, log.current = log.current, stream.name
        try:
            yield
        finally:
            log.current = outer

    def empty(shape: list[int], dtype: str, device: Any) -> FakeTensor:
        log.add("empty", shape=list(shape), device=device)
        data = np.zeros(shape, dtype=dtype)
        if device == "pinned":
            log.pinned.append(data)
        return FakeTensor(log, data, str(device))

    def from_dlpack(array: np.ndarray) -> FakeTensor:
        return FakeTensor(log, array, "cpu")

    def kernel(name: str, data: np.ndarray, place: str) -> FakeTensor:
        log.add(name)
        return FakeTensor(log, data, place)

    paddle = types.ModuleType("paddle")
    paddle.inference = inference  # type: ignore[attr-defined]
    paddle.device = types.SimpleNamespace(Stream=Stream, Event=Event, stream_guard=stream_guard)  # type: ignore[attr-defined]
    paddle.CUDAPinnedPlace = lambda: "pinned"  # type: ignore[attr-defined]
    paddle.float32 = "float32"  # type: ignore[attr-defined]
    paddle.empty = empty  # type: ignore[attr-defined]
    paddle.utils = types.SimpleNamespace(dlpack=types.SimpleNamespace(from_dlpack=from_dlpack))  # type: ignore[attr-defined]
    paddle.argmax = lambda t, axis: kernel("argmax", t.data.argmax(axis=axis), t.place)  # type: ignore[attr-defined]
    paddle.amax = lambda t, axis: kernel("amax", t.data.max(axis=axis), t.place)  # type: ignore[attr-defined]
    paddle.stack = lambda ts, axis: kernel(  # type: ignore[attr-defined]
        "stack", np.stack([t.data for t in ts], axis=axis), ts[0].place
    )
    return paddle
