"""The GPU engine limit with the server's batches: what the device alone does with them.

The limit the check bounds the server by must be measured with the batches the server would run
(issue 40): before, the detector's and recogniser's inputs were replayed as one page at a time
made them (a det batch of one page, rec batches of that page's lines), which leaves a GPU
launch-bound, so the server beat the "limit" and its 0.8x criterion meant nothing. Here:

1. `page_calls`: each page goes through the page pipeline's own steps (`pipelines.page`, as
   `pipelines.ocr.run_page` drives them) with bucketed batching's padding, and every model
   call's input is kept as the uint8 `Pixels` that would cross to a device worker;
2. `server_batches`: those inputs grouped as the scheduler groups them with every page in
   flight (`serving.scheduling.batching`: one bucket per det input size and rec width, filled
   up to `[workers.gpu]`'s `max_batch_size` rows and `max_cost`);
3. `replay`: the batches launched on the lane as a device worker launches them (uint8 pixels
   into `stage_pixels` slots where the predictor normalises on its device, its
   `inflight_batches` in flight), round after round; a round holds `in_flight` copies of each
   page, as many as a det batch holds, as a load test's many requests over a few pages do.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from models.base import Predictor
from pipelines.page import after_det, finish, prepare
from pipelines.pixels import Pixels, row_sizes
from pipelines.stages import ModelStage, Stage
from serving.config import StageLimits
from serving.request_options import OcrOptions


class DeviceCall(NamedTuple):
    """One model call's input as a device worker receives it."""

    stage: Stage
    """ "det" or "rec"."""
    pixels: Pixels


class PageCalls(NamedTuple):
    """What one page asked of the device, and what it read."""

    calls: list[DeviceCall]
    texts: list[str]
    maps: dict[str, np.ndarray]
    """The detector's map for its input's "HxW" (what `check.REPLAY` answers with)."""


def page_calls(
    predictors: Mapping[str, Predictor],
    stages: Mapping[str, ModelStage[Any]],
    image: np.ndarray,
    options: OcrOptions,
    charset: Sequence[str],
) -> PageCalls:
    """OCR one BGR page with the pipeline's steps, keeping each model call's uint8 input.

    Raises:
        ValueError: `options` run a page or textline classifier: the check serves det and rec
            alone (the GPU bundle's models).
    """
    if options.cls is not None or options.ori is not None:
        raise ValueError("the GPU check's engine limit runs det and rec alone")
    calls: list[DeviceCall] = []
    maps: dict[str, np.ndarray] = {}

    def call(stage: Stage, pixels: list[Pixels]) -> list[Any]:
        outputs = []
        for p in pixels:
            calls.append(DeviceCall(stage, p))
            out = np.asarray(predictors[stage].run(p.normalized(stage)))
            if stage == "det":
                maps.setdefault(f"{p.data.shape[2]}x{p.data.shape[3]}", out[0].copy())
            outputs.append(stages[stage].output(out))
        return outputs

    step = prepare(image, options.det)
    step = after_det(step.state, image, call("det", step.pixels), options.det, options.rec, None)
    page = finish(step.state, call("rec", step.pixels), options.rec, charset)
    return PageCalls(calls, [line.text for line in page.lines], maps)


def in_flight(pages: Sequence[Sequence[DeviceCall]], copies: int) -> list[DeviceCall]:
    """The calls of `copies` copies of each page, page after page, copy after copy: what the
    scheduler holds when a load test keeps many requests in flight over a few distinct pages
    (it sends them in turn), so that det batches can fill with pages of one size even where
    the pages differ in size."""
    if copies < 1:
        raise ValueError(f"copies must be >= 1, got {copies}")
    return [call for _ in range(copies) for page in pages for call in page]


def bucket_and_cost(call: DeviceCall) -> tuple[tuple[Any, ...], int]:
    """The scheduler's bucket and cost of one input (`serving.service.ocr`'s `_infer`): det by
    input size, charged by pixels; rec by padded width, charged by width x rows."""
    rows, _, height, width = call.pixels.data.shape
    if call.stage == "det":
        return (call.stage, height, width), rows * height * width
    return (call.stage, width), rows * width


def server_batches(
    calls: Sequence[DeviceCall], limits: Mapping[str, StageLimits]
) -> list[DeviceCall]:
    """`calls` grouped as the scheduler would with all of them queued at once: per bucket, in
    arrival order, a batch closes when the next input would take it past the stage's
    `max_batch_size` rows or `max_cost` (one input alone always fits). Batches come out in the
    order they closed, the part-filled ones last, in their buckets' first arrival."""
    open_: dict[tuple[Any, ...], list[DeviceCall]] = {}
    totals: dict[tuple[Any, ...], tuple[int, int]] = {}
    out: list[DeviceCall] = []
    for call in calls:
        bucket, cost = bucket_and_cost(call)
        cap = limits[call.stage]
        rows_now, cost_now = totals.get(bucket, (0, 0))
        rows = int(call.pixels.data.shape[0])
        held = open_.setdefault(bucket, [])
        if held and (rows_now + rows > cap.max_batch_size or cost_now + cost > cap.max_cost):
            out.append(_stack(held))
            held.clear()
            rows_now, cost_now = 0, 0
        held.append(call)
        totals[bucket] = (rows_now + rows, cost_now + cost)
    out += [_stack(held) for held in open_.values() if held]
    return out


def _stack(calls: Sequence[DeviceCall]) -> DeviceCall:
    """Inputs of one bucket as one batch, as a device worker collates them (`row_sizes`)."""
    if len(calls) == 1:
        return calls[0]
    arrays = [c.pixels.data for c in calls]
    sizes = row_sizes([a.shape for a in arrays], [c.pixels.sizes for c in calls])
    return DeviceCall(calls[0].stage, Pixels(np.concatenate(arrays), sizes, calls[0].pixels.norm))


def replay(
    predictors: Mapping[str, Predictor],
    batches: Sequence[DeviceCall],
    pages: int,
    min_seconds: float,
) -> dict[str, Any]:
    """The GPU engine limit: `batches` (one round of `pages` pages) launched on the device alone,
    round after round for at least `min_seconds` after one warm round; uint8 pixels into
    `stage_pixels` slots where the predictor normalises on its device, else float32 (normalised
    before the clock runs); each lane keeps its `inflight_batches` launched, the oldest waited
    for before another (one lane for all of a worker's predictors, det and rec together)."""
    from models.staging import PixelInput, Slot, StagedPredictor

    floats = {
        id(b): b.pixels.normalized(b.stage)
        for b in batches
        if not isinstance(predictors[b.stage], PixelInput)
    }

    def one_round() -> None:
        in_flight: dict[int, list[Slot]] = {}
        for batch in batches:
            predictor = predictors[batch.stage]
            if not isinstance(predictor, StagedPredictor):
                predictor.run(floats[id(batch)])
                continue
            options = getattr(predictor, "options", None)
            launched = int(getattr(options, "inflight_batches", 1))
            mine = in_flight.setdefault(id(getattr(predictor, "lane", batch.stage)), [])
            while len(mine) >= launched:  # all launched: the oldest comes back first
                oldest = mine.pop(0)
                oldest.result()
                oldest.release()
            if isinstance(predictor, PixelInput):
                slot = predictor.stage_pixels(batch.pixels.data.shape)
                slot.input[...] = batch.pixels.data
                slot.sizes = batch.pixels.sizes
            else:
                slot = predictor.stage(batch.pixels.data.shape)
                slot.input[...] = floats[id(batch)]
            predictor.launch(slot)
            mine.append(slot)
        for mine in in_flight.values():
            for slot in mine:
                slot.result()
                slot.release()

    one_round()  # warm: shapes seen for the first time
    rounds = 0
    started = time.monotonic()
    while rounds == 0 or time.monotonic() - started < min_seconds:
        one_round()
        rounds += 1
    wall = time.monotonic() - started
    rows: dict[str, list[int]] = {}
    for batch in batches:
        rows.setdefault(batch.stage, []).append(int(batch.pixels.data.shape[0]))
    return {
        "pages_per_s": round(pages * rounds / wall, 4),
        "rounds": rounds,
        "wall_s": round(wall, 3),
        "batches_a_round": len(batches),
        "rows_a_batch": {s: round(sum(r) / len(r), 1) for s, r in rows.items()},
        "rows_a_round": {s: sum(r) for s, r in rows.items()},
        "uint8_in": {
            s: isinstance(predictors[s], PixelInput) for s in sorted({b.stage for b in batches})
        },
    }
