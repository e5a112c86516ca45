"""Pinned staging and stream pipelining for one device worker instance (a "lane").

A device worker collates each batch straight into a reusable page-locked host buffer (a `Slot`),
then `Lane.launch` issues, without waiting for anything:

    upload stream:    H2D copy of the slot's input          -> event "uploaded"
    compute stream:   waits "uploaded", runs the model       -> event "computed"
    download stream:  waits "computed", D2H copy into the slot's page-locked output -> "done"

and returns. Only `Slot.result()` waits (for "done"). With two slots in flight the H2D copy of
batch n+1 runs while batch n computes, and batch n's D2H copy while batch n+1 computes: a single
CUDA stream would run them one after another, so the copies have streams of their own. All three
streams and the slots belong to the instance (one worker process), shared by its det/cls/rec
models; nothing here knows torch: `DeviceOps` is the device (`models.torch_device` on CUDA and
CPU, a fake with timed copies and kernels in the unit tests).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import numpy as np


class Event(Protocol):
    """A point in a stream's work (a CUDA event)."""

    def synchronize(self) -> None:
        """Block the host until the work before the event is done."""
        ...


class DeviceOps(Protocol):
    """The device operations a lane issues; every call returns without waiting for the device."""

    def new_stream(self) -> Any:
        """A new stream: work on one stream runs in order, on different streams concurrently."""
        ...

    def pinned_host(self, nbytes: int) -> np.ndarray:
        """`nbytes` of page-locked host memory as a uint8 array (plain memory on a CPU)."""
        ...

    def record(self, stream: Any) -> Event:
        """An event marking the work issued on `stream` so far."""
        ...

    def wait(self, stream: Any, event: Event) -> None:
        """Make later work on `stream` wait for `event` (the host does not wait)."""
        ...

    def upload(self, host: np.ndarray, stream: Any) -> Any:
        """Copy `host` (page-locked) to the device on `stream`; returns the device array."""
        ...

    def compute(self, fn: Callable[[Any], Any], x: Any, stream: Any) -> Any:
        """Run `fn(x)` on `stream`; returns its (device) output."""
        ...

    def output_shape(self, y: Any) -> tuple[int, ...]:
        """The shape of a device output (known when `compute` returns)."""
        ...

    def download(self, y: Any, host: np.ndarray, stream: Any) -> None:
        """Copy the device output `y` into `host` (page-locked, y's dtype and shape) on `stream`."""
        ...


def lane_slots(inflight_batches: int) -> int:
    """Page-locked slots of a device worker's lane: its `inflight_batches` launched
    (`EngineOptions.inflight_batches`), and one more for a batch being collated."""
    return inflight_batches + 1


class LaneError(RuntimeError):
    """A slot used out of order: launched twice, read before launch, or all slots taken."""


def _grown(nbytes: int) -> int:
    """Capacity for `nbytes`: a quarter more, in whole MiB, so that slightly larger batches
    later do not each reallocate page-locked memory (slow: it maps and pins pages)."""
    mib = 1 << 20
    return max(mib, -(-(nbytes + nbytes // 4) // mib) * mib)


class Slot:
    """One batch's page-locked input and output buffers, reused batch after batch.

    Lifecycle: `Lane.stage()` hands it out with `input` shaped for the batch; the caller fills
    `input`; `Lane.launch()`; `result()` (a view into the page-locked output, valid until
    `release()`); `release()` returns it to the lane.
    """

    def __init__(self, lane: Lane, index: int) -> None:
        self._lane = lane
        self.index = index
        self._in_buffer = np.empty(0, dtype=np.uint8)
        self._out_buffer = np.empty(0, dtype=np.uint8)
        self.input: np.ndarray = np.empty(0, dtype=np.float32)
        """The batch input (float32, or uint8 pixels), a view into page-locked memory: collate
        into it."""
        self.sizes: tuple[tuple[int, int], ...] = ()
        """With uint8 pixels: each row's (height, width) of pixels, the rest padding
        (`pipelines.pixels.Pixels.sizes`); set by whoever collates."""
        self._output: np.ndarray | None = None
        self._done: Event | None = None
        self._device_refs: tuple[Any, ...] = ()

    def shape_input(
        self, shape: tuple[int, ...], dtype: type[np.generic] = np.float32
    ) -> np.ndarray:
        nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
        if self._in_buffer.nbytes < nbytes:
            self._in_buffer = self._lane.ops.pinned_host(_grown(nbytes))
        self.input = self._in_buffer[:nbytes].view(dtype).reshape(shape)
        self.sizes = ()
        self._output = None
        self._done = None
        return self.input

    def shape_output(
        self, shape: tuple[int, ...], dtype: type[np.generic] = np.float32
    ) -> np.ndarray:
        nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
        if self._out_buffer.nbytes < nbytes:
            self._out_buffer = self._lane.ops.pinned_host(_grown(nbytes))
        output: np.ndarray = self._out_buffer[:nbytes].view(dtype).reshape(shape)
        self._output = output
        return output

    def issued(self, done: Event, device_refs: tuple[Any, ...]) -> None:
        self._done = done
        self._device_refs = device_refs  # kept alive until the copies are done

    @property
    def launched(self) -> bool:
        """Whether `Lane.launch` has issued this slot's work."""
        return self._done is not None

    def result(self) -> np.ndarray:
        """Wait for this batch's output and return it: a view into page-locked memory, valid
        until `release()` (copy what must outlive it)."""
        if self._done is None or self._output is None:
            raise LaneError(f"slot {self.index} read before it was launched")
        self._done.synchronize()
        self._device_refs = ()
        return self._output

    def wait(self) -> None:
        """Block until the slot's device work is done; never raises (errors surface in
        `result()`). Safe from another thread."""
        done = self._done
        if done is not None:
            try:
                done.synchronize()
            except Exception:  # result() raises it again
                return

    def release(self) -> None:
        """Give the slot back; waits for its copies first if they may still be running."""
        if self._done is not None:
            self._done.synchronize()
        self._done = None
        self._output = None
        self._device_refs = ()
        self._lane.give_back(self)


class Lane:
    """The streams and page-locked slots of one device worker instance.

    Args:
        ops: the device.
        max_slots: batches that may be staged or in flight at once (the worker's
            `inflight_batches`, plus one for a batch being collated).
    """

    def __init__(self, ops: DeviceOps, *, max_slots: int = 3) -> None:
        if max_slots < 1:
            raise ValueError(f"max_slots must be >= 1, got {max_slots}")
        self.ops = ops
        self.max_slots = max_slots
        self.upload_stream = ops.new_stream()
        self.compute_stream = ops.new_stream()
        self.download_stream = ops.new_stream()
        self._slots: list[Slot] = []
        self._free: list[Slot] = []

    @property
    def slots(self) -> int:
        """Slots created so far (each holds page-locked memory)."""
        return len(self._slots)

    def stage(self, shape: tuple[int, ...], dtype: type[np.generic] = np.float32) -> Slot:
        """A free slot whose `input` has `shape` and `dtype` (float32, or uint8 pixels).

        Raises:
            LaneError: `max_slots` slots are already staged or in flight.
        """
        if self._free:
            slot = self._free.pop()
        elif len(self._slots) < self.max_slots:
            slot = Slot(self, len(self._slots))
            self._slots.append(slot)
        else:
            raise LaneError(f"all {self.max_slots} slots are in use")
        slot.shape_input(tuple(shape), dtype)
        return slot

    def launch(
        self, slot: Slot, fn: Callable[[Any], Any], out_dtype: type[np.generic] = np.float32
    ) -> None:
        """Issue the slot's upload, `fn` on the device, and the download (of `out_dtype`: what
        `fn` answers, float32 or a detector's uint8 byte map); returns at once."""
        if slot.launched:
            raise LaneError(f"slot {slot.index} launched twice")
        ops = self.ops
        x = ops.upload(slot.input, self.upload_stream)
        ops.wait(self.compute_stream, ops.record(self.upload_stream))
        y = ops.compute(fn, x, self.compute_stream)
        ops.wait(self.download_stream, ops.record(self.compute_stream))
        host = slot.shape_output(ops.output_shape(y), out_dtype)
        ops.download(y, host, self.download_stream)
        slot.issued(ops.record(self.download_stream), (x, y))

    def run(
        self,
        batch: np.ndarray,
        fn: Callable[[Any], Any],
        out_dtype: type[np.generic] = np.float32,
    ) -> np.ndarray:
        """Stage, launch and wait for one batch; returns a fresh array (no pipelining)."""
        slot = self.stage(batch.shape)
        try:
            np.copyto(slot.input, batch, casting="same_kind")
            self.launch(slot, fn, out_dtype)
            return np.array(slot.result(), copy=True)
        finally:
            slot.release()

    def give_back(self, slot: Slot) -> None:
        if slot not in self._free:
            self._free.append(slot)


@runtime_checkable
class StagedPredictor(Protocol):
    """A predictor a device worker can pipeline: it collates into `stage(shape).input`, calls
    `launch(slot)`, and reads `slot.result()` later, with other batches launched meanwhile."""

    def stage(self, shape: tuple[int, ...]) -> Slot:
        """A slot whose `input` has `shape`."""
        ...

    def launch(self, slot: Slot) -> None:
        """Issue the slot's batch; returns without waiting for it."""
        ...


@runtime_checkable
class PixelInput(Protocol):
    """A staged predictor that takes uint8 pixels and normalises them on its device
    (`pipelines.pixels`): a device worker collates pixels into `stage_pixels(shape).input`, sets
    the slot's `sizes`, and launches it; a quarter of the bytes of float32 in page-locked memory
    and over the host-to-device copy."""

    def stage_pixels(self, shape: tuple[int, ...]) -> Slot:
        """A slot whose `input` is uint8 of `shape` (n, 3, h, w)."""
        ...
