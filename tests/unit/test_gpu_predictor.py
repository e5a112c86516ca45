"""The GPU data path against a fake `paddle` module that records calls and their order."""

from __future__ import annotations

import contextlib
import types
from typing import Any

import numpy as np
import pytest

from models.base import PredictorError
from models.embedded import embedded_model_dir
from models.engine_options import EngineOptions
from models.gpu_predictor import GpuPredictor
from models.spec import load_model_spec
from tests.fakes.paddle_inference import Precision, make_config_class

Call = tuple[str, dict[str, Any]]


class FakeTensor:
    def __init__(self, calls: list[Call], data: np.ndarray, place: str) -> None:
        self._calls = calls
        self.data = data
        self.place = place

    def cuda(self, device_id: int | None = None, blocking: bool = True) -> FakeTensor:
        self._calls.append(("Tensor.cuda", {"device_id": device_id, "blocking": blocking}))
        return FakeTensor(self._calls, self.data.copy(), f"gpu:{device_id}")

    def numpy(self) -> np.ndarray:
        self._calls.append(("Tensor.numpy", {"place": self.place}))
        return self.data  # aliases, like a tensor that shares predictor memory


class FakePredictor:
    """Returns the same output tensor every run, overwritten in place (Paddle's aliasing)."""

    def __init__(self, calls: list[Call]) -> None:
        self._calls = calls
        self._out = FakeTensor(calls, np.zeros((1,)), "gpu:out")

    def run(self, inputs: list[FakeTensor]) -> list[FakeTensor]:
        (x,) = inputs
        self._calls.append(("Predictor.run", {"place": x.place, "shape": x.data.shape}))
        self._out.data = np.full((x.data.shape[0], 2), float(x.data.sum()), dtype=np.float32)
        return [self._out]


def make_fake_paddle(calls: list[Call], *, cuda_build: bool = True) -> types.ModuleType:
    config_class = make_config_class(calls)
    if cuda_build:

        def set_exec_stream(self: Any, stream: Any) -> None:
            calls.append(("set_exec_stream", {"stream": stream}))

        config_class.set_exec_stream = set_exec_stream  # type: ignore[attr-defined]
    inference = types.ModuleType("paddle.inference")
    inference.Config = config_class  # type: ignore[attr-defined]
    inference.PrecisionType = Precision  # type: ignore[attr-defined]
    inference.get_version = lambda: "version: 3.2.2"  # type: ignore[attr-defined]

    def create_predictor(config: Any) -> FakePredictor:
        calls.append(("create_predictor", {}))
        return FakePredictor(calls)

    inference.create_predictor = create_predictor  # type: ignore[attr-defined]

    class Stream:
        def __init__(self, device: str | None = None, priority: int | None = None) -> None:
            calls.append(("Stream", {"device": device}))
            self.stream_base = f"stream-base-{device}"

        def synchronize(self) -> None:
            calls.append(("Stream.synchronize", {}))

    @contextlib.contextmanager
    def stream_guard(stream: Stream):  # type: ignore[no-untyped-def]
        calls.append(("stream_guard.enter", {"stream": stream.stream_base}))
        yield
        calls.append(("stream_guard.exit", {}))

    paddle = types.ModuleType("paddle")
    paddle.inference = inference  # type: ignore[attr-defined]
    paddle.device = types.SimpleNamespace(Stream=Stream, stream_guard=stream_guard)  # type: ignore[attr-defined]
    paddle.CUDAPinnedPlace = lambda: "pinned"  # type: ignore[attr-defined]

    def to_tensor(data: np.ndarray, dtype: Any = None, place: Any = None) -> FakeTensor:
        calls.append(("to_tensor", {"place": place, "shape": data.shape}))
        return FakeTensor(calls, np.array(data), str(place))

    paddle.to_tensor = to_tensor  # type: ignore[attr-defined]
    return paddle


@pytest.fixture
def rec_spec():
    return load_model_spec(embedded_model_dir("PP-OCRv5_mobile_rec"), "rec")


def names(calls: list[Call]) -> list[str]:
    return [name for name, _ in calls]


def test_load_binds_predictor_to_its_own_stream(rec_spec) -> None:
    calls: list[Call] = []
    predictor = GpuPredictor(rec_spec, EngineOptions(device="gpu:1"), make_fake_paddle(calls))
    predictor.load()
    order = names(calls)
    assert order[0] == "Stream"
    assert calls[0][1] == {"device": "gpu:1"}
    gpu = next(args for name, args in calls if name == "enable_use_gpu")
    assert gpu["device_id"] == 1
    assert order.index("set_exec_stream") < order.index("create_predictor")
    assert dict(calls)["set_exec_stream"] == {"stream": "stream-base-gpu:1"}


def test_run_stages_pinned_copies_async_on_stream_and_copies_out(rec_spec) -> None:
    calls: list[Call] = []
    predictor = GpuPredictor(rec_spec, EngineOptions(device="gpu:0"), make_fake_paddle(calls))
    predictor.load()
    calls.clear()
    first = predictor.run(np.ones((2, 3, 48, 320), dtype=np.float32))
    assert names(calls) == [
        "stream_guard.enter",
        "to_tensor",
        "Tensor.cuda",
        "Predictor.run",
        "Tensor.numpy",
        "stream_guard.exit",
    ]
    assert calls[0][1] == {"stream": "stream-base-gpu:0"}
    assert calls[1][1] == {"place": "pinned", "shape": (2, 3, 48, 320)}
    assert calls[2][1] == {"device_id": 0, "blocking": False}
    assert calls[3][1]["place"] == "gpu:0"
    # The second run overwrites the predictor's output tensor; the first result must not change.
    predictor.run(np.zeros((2, 3, 48, 320), dtype=np.float32))
    assert first.shape == (2, 2)
    assert float(first[0, 0]) == 2 * 3 * 48 * 320


def test_without_exec_stream_the_copy_is_synchronised_before_run(rec_spec) -> None:
    calls: list[Call] = []
    paddle = make_fake_paddle(calls, cuda_build=False)
    predictor = GpuPredictor(rec_spec, EngineOptions(device="gpu:0"), paddle)
    predictor.load()
    calls.clear()
    predictor.run(np.ones((1, 3, 48, 320), dtype=np.float32))
    order = names(calls)
    assert (
        order.index("Tensor.cuda")
        < order.index("Stream.synchronize")
        < order.index("Predictor.run")
    )


def test_gpu_predictor_refuses_cpu(rec_spec) -> None:
    with pytest.raises(PredictorError):
        GpuPredictor(rec_spec, EngineOptions(device="cpu"))
