"""`models.staging.DeviceOps` for Paddle's GPU build: its streams, events and pinned memory.

The lane (`models.staging.Lane`) collates each batch into page-locked host memory that numpy
sees directly, so these operations move memory between numpy views and Paddle tensors without
copying on the host:

- pinned memory comes from Paddle's pinned allocator (`paddle.empty(...,
  device=CUDAPinnedPlace())`) and is handed out as a numpy view of the tensor's memory
  (`host_array`), which keeps the tensor alive;
- a copy in or out wraps the numpy view as a Paddle CPU tensor without copying (`host_tensor`,
  DLPack); Paddle's copies between a CPU and a GPU tensor issue `cudaMemcpyAsync` on the current
  stream when not blocking, which the driver runs asynchronously because the memory is pinned.

Written against Paddle 3.2's Python API; `paddle` is passed in (tests pass a fake, and
tests/integration checks the host-side helpers against Paddle's CPU build).
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from models.staging import Lane, lane_slots


def host_array(tensor: Any, nbytes: int) -> np.ndarray:
    """A uint8 numpy view of the first `nbytes` of a host tensor's memory; the view keeps the
    tensor (and so its memory) alive."""
    buffer = (ctypes.c_uint8 * nbytes).from_address(int(tensor.data_ptr()))
    buffer._tensor = tensor  # type: ignore[attr-defined]
    return np.frombuffer(memoryview(buffer).cast("B"), dtype=np.uint8)


def host_tensor(paddle: Any, array: np.ndarray) -> Any:
    """A Paddle CPU tensor on `array`'s memory (DLPack; no copy)."""
    return paddle.utils.dlpack.from_dlpack(array)


def detached_output(paddle: Any, output: Any, *, argmax: bool) -> Any:
    """The predictor's output in memory of its own, as float32: the tensors `run()` returns
    alias the predictor's memory, which its next run overwrites, maybe before this one is
    copied to the host. With `argmax`, each row's best class and its probability over the last
    axis (`models.base.ArgmaxOutput`) instead: a device-side reduction, so that much less to
    copy. Issued on the current stream."""
    if argmax:
        indices = paddle.argmax(output, axis=-1).astype("float32")  # ties: the first index
        # amax, not max: the same value, without paddle.max's torch-compatibility warning.
        values = paddle.amax(output, axis=-1).astype("float32")
        return paddle.stack([indices, values], axis=-1)
    if output.dtype != paddle.float32:
        return output.astype("float32")
    return output.clone()


class PaddleCudaOps:
    """One GPU through Paddle: `paddle.device.Stream`s and their events, page-locked host
    memory, and non-blocking copies issued under `paddle.device.stream_guard`."""

    def __init__(self, paddle: Any, device_id: int) -> None:
        self.paddle = paddle
        self.device_id = device_id

    def new_stream(self) -> Any:
        return self.paddle.device.Stream(device=f"gpu:{self.device_id}")

    def pinned_host(self, nbytes: int) -> np.ndarray:
        paddle = self.paddle
        tensor = paddle.empty([nbytes], dtype="uint8", device=paddle.CUDAPinnedPlace())
        return host_array(tensor, nbytes)

    def record(self, stream: Any) -> Any:
        # Blocking, as `models.torch_device.CudaOps.record`: a waiting host sleeps, not spins.
        event = self.paddle.device.Event(device=f"gpu:{self.device_id}", blocking=True)
        return stream.record_event(event)

    def wait(self, stream: Any, event: Any) -> None:
        stream.wait_event(event)

    def upload(self, host: np.ndarray, stream: Any) -> Any:
        with self.paddle.device.stream_guard(stream):
            return host_tensor(self.paddle, host).cuda(self.device_id, blocking=False)

    def compute(self, fn: Callable[[Any], Any], x: Any, stream: Any) -> Any:
        with self.paddle.device.stream_guard(stream):
            return fn(x)

    def output_shape(self, y: Any) -> tuple[int, ...]:
        return tuple(int(d) for d in y.shape)

    def download(self, y: Any, host: np.ndarray, stream: Any) -> None:
        with self.paddle.device.stream_guard(stream):
            host_tensor(self.paddle, host).copy_(y, False)


@functools.cache
def paddle_lane(paddle: Any, device_id: int, *, inflight_batches: int) -> Lane:
    """The lane of this process's GPU: one per device worker process (= instance), shared by
    its det/cls/rec predictors, which all run on its compute stream, with room for
    `inflight_batches` launched (`EngineOptions.inflight_batches`)."""
    return Lane(PaddleCudaOps(paddle, device_id), max_slots=lane_slots(inflight_batches))
