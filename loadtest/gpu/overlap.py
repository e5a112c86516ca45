"""Whether a lane keeps its compute stream busy with two batches in flight, from CUDA events.

`max(overlaps) > 0` (batch n + 1's copy in began before batch n's compute ended) also holds for
a forward that synchronises near its end, so it proved little (issue 40). What matters is the
compute stream's share of the wall time once batches stream in as a device worker sends them
(collate into a slot, launch, wait for the oldest of `inflight_batches`): over a steady window,
from the start of the second batch's compute to the end of the last but one, the time some
batch computed, from timing events recorded on the compute stream around each model run.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from types import SimpleNamespace
from typing import Any

import numpy as np

BUSY_MIN = 0.9
"""The compute stream's least busy share of a steady window that passes."""


def busy_fraction(intervals: Sequence[tuple[float, float]]) -> float | None:
    """The share of the steady window that `intervals` (each batch's compute, start and end in
    ms, in launch order) cover, overlaps counted once; the window runs from the second's start to
    the last but one's end (the first waits for its copy in alone, the last for nothing). None
    with fewer than four intervals (no steady window)."""
    if len(intervals) < 4:
        return None
    window_start, window_end = intervals[1][0], intervals[-2][1]
    if window_end <= window_start:
        return None
    busy = 0.0
    reached = window_start
    for start, end in sorted(intervals):
        start, end = max(start, reached), min(end, window_end)
        if end > start:
            busy += end - start
            reached = end
    return busy / (window_end - window_start)


def compute_busy(
    predictor: Any,
    batch: np.ndarray,
    *,
    batches: int = 10,
    sizes: tuple[tuple[int, int], ...] = (),
    new_event: Callable[[], Any] | None = None,
    synchronize: Callable[[], object] | None = None,
) -> dict[str, Any]:
    """Stream `batches` copies of the uint8 `batch` through a CUDA `predictor` as a device
    worker does (`inflight_batches` launched, each collated into its `stage_pixels` slot while
    the one before computes), with timing events (`new_event`: CUDA's, with timing) around every
    model run on the compute stream (the lane's `ops.compute` wrapped a while); the compute
    stream's `busy_fraction`."""
    if new_event is None or synchronize is None:
        import torch

        new_event = new_event or functools.partial(torch.cuda.Event, enable_timing=True)
        synchronize = synchronize or torch.cuda.synchronize
    lane = predictor.lane
    ops = lane.ops
    marks: list[tuple[Any, Any]] = []

    def compute(*args: Any) -> Any:
        stream = args[-1]
        start, end = new_event(), new_event()
        start.record(stream)
        out = ops.compute(*args)
        end.record(stream)
        marks.append((start, end))
        return out

    names = ("new_stream", "pinned_host", "record", "wait", "upload", "download", "output_shape")
    lane.ops = SimpleNamespace(**{n: getattr(ops, n) for n in names}, compute=compute)
    in_flight: list[Any] = []
    depth = int(predictor.options.inflight_batches)
    try:
        for _ in range(batches):
            if len(in_flight) >= depth:
                oldest = in_flight.pop(0)
                oldest.result()
                oldest.release()
            slot = predictor.stage_pixels(batch.shape)
            slot.input[...] = batch
            slot.sizes = sizes
            predictor.launch(slot)
            in_flight.append(slot)
        for slot in in_flight:
            slot.result()
            slot.release()
        synchronize()
    finally:
        lane.ops = ops
    origin = marks[0][0]
    intervals = [(origin.elapsed_time(a), origin.elapsed_time(b)) for a, b in marks]
    busy = busy_fraction(intervals)
    return {
        "shape": list(batch.shape),
        "batches": batches,
        "in_flight": depth,
        "compute_ms": round(float(np.median([b - a for a, b in intervals])), 2),
        "busy_fraction": None if busy is None else round(busy, 3),
        "passes": busy is not None and busy >= BUSY_MIN,
    }
