"""Bucketed batching (`[engine] batching`): what it pads, that a crop reads the same in any batch,
that work of different pages shares a scheduler bucket and a batch, and that exact mode pads as
PaddleOCR does."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import numpy as np
import pytest

from models.torch_options import TorchOptions
from pipelines import page as steps
from pipelines.rec_preprocess import plan_rec_chunks, resize_norm_rec
from pipelines.types import DetParams, RecParams
from serving.config import AppConfig, QueueConfig, StageLimits, build
from serving.errors import ConfigError
from serving.scheduling.batch_shapes import BatchShapes, batching_mode
from serving.scheduling.batching import BatchPolicy, WorkItem
from serving.scheduling.priorities import INTERACTIVE

WIDTHS = (320, 480, 640, 960)
GPU_REC = StageLimits(max_batch_size=96, max_cost=96 * 1600)
GPU_DET = StageLimits(max_batch_size=8, max_cost=32_000_000)


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def _crop(width: int, seed: int, height: int = 32) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (height, width, 3), dtype=np.uint8)


def _crops(widths: list[int]) -> list[np.ndarray]:
    return [_crop(w, seed) for seed, w in enumerate(widths)]


def _item(
    loop: asyncio.AbstractEventLoop, stage: str, shape: tuple[int, ...], page: str
) -> WorkItem:
    """A work item keyed as `OcrService._infer` keys it, from its input's shape."""
    rows, _, height, width = shape
    bucket = (height, width) if stage == "det" else width
    cost = rows * height * width if stage == "det" else rows * width
    return WorkItem(
        stage=stage,
        bucket=bucket,
        payload=page,
        count=rows,
        cost=cost,
        priority=INTERACTIVE,
        deadline=1e9,
        future=loop.create_future(),
        page=page,
    )


def _queues() -> dict[str, QueueConfig]:
    return {s: QueueConfig(max_wait_ms=0.0) for s in ("det", "cls", "rec")}


def test_auto_is_bucketed_where_a_gpu_serves_and_exact_on_cpus() -> None:
    assert batching_mode("auto", ["gpu", "cpu"]) == "bucketed"
    assert batching_mode("auto", ["cpu", "cpu"]) == "exact"
    assert batching_mode("exact", ["gpu"]) == "exact"
    assert batching_mode("bucketed", ["cpu"]) == "bucketed"
    assert BatchShapes.of("exact", TorchOptions()) is None


def test_config_refuses_an_unknown_batching_mode() -> None:
    assert build(AppConfig, {"engine": {"batching": "bucketed"}}).engine.batching == "bucketed"
    with pytest.raises(ConfigError, match=r"engine\.batching"):
        build(AppConfig, {"engine": {"batching": "tight"}})


def test_bucketed_chunks_are_padded_to_their_width_bucket() -> None:
    # 48 px high crops: widths 320 (the minimum), 400, 700 and 3000 once resized.
    crops = _crops([200, 266, 466, 2000, 150, 300])
    params = RecParams(pad_widths_px=WIDTHS, batch_size=2)
    chunks = plan_rec_chunks(crops, params)
    widths = [c.tensor.shape[3] for c in chunks]
    assert widths == sorted(widths)
    assert set(widths) <= {*WIDTHS, 3000}  # beyond the last bucket: its own width
    by_width = {c.tensor.shape[3]: set(c.indices) for c in chunks}
    assert {0, 4} <= by_width[320]
    assert by_width[480] == {1, 5}
    assert by_width[960] == {2}
    assert by_width[3000] == {3}
    assert sorted(i for c in chunks for i in c.indices) == list(range(len(crops)))
    assert all(len(c.indices) <= 2 for c in chunks)


def test_a_crop_reads_the_same_whatever_its_companions_in_bucketed_mode() -> None:
    crop = _crop(300, seed=7)  # resized to 450 px: the 480 bucket
    params = RecParams(pad_widths_px=WIDTHS)
    alone = plan_rec_chunks([crop], params)
    with_wider = plan_rec_chunks([crop, _crop(310, seed=8), _crop(316, seed=9)], params)
    row = next(c.tensor[c.indices.index(0)] for c in with_wider if 0 in c.indices)
    assert np.array_equal(alone[0].tensor[0], row)
    # Exact mode pads a chunk to its widest member, as PaddleOCR does: the row differs.
    exact = plan_rec_chunks([crop, _crop(316, seed=9)], RecParams())
    assert exact[0].tensor.shape[3] == 474
    assert alone[0].tensor.shape[3] == 480


def test_exact_mode_chunks_are_paddleocrs() -> None:
    crops = _crops([200, 266, 466, 150])
    params = RecParams(batch_size=2)
    chunks = plan_rec_chunks(crops, params)
    assert [c.indices for c in chunks] == [(3, 0), (1, 2)]  # sorted by ratio, cut in twos
    assert [c.tensor.shape[3] for c in chunks] == [320, 699]  # each its widest
    expected = resize_norm_rec(crops[2], 466 / 32, params)
    assert np.array_equal(chunks[1].tensor[1], expected)


def test_rows_of_different_pages_pack_into_one_batch_up_to_the_limit(
    loop: asyncio.AbstractEventLoop,
) -> None:
    params = RecParams(pad_widths_px=WIDTHS)
    policy = BatchPolicy(_queues())
    # 20 pages, each with 6 crops of slightly different widths (as real pages have), all of
    # them 330-366 px wide once resized: the 480 px bucket.
    for page in range(20):
        crops = [_crop(220 + page + k, seed=page * 10 + k) for k in range(6)]
        for chunk in plan_rec_chunks(crops, params):
            policy.submit(_item(loop, "rec", chunk.tensor.shape, f"p{page}"), now=0.0)
    batch = policy.select(0.0, ["rec"], {"rec": GPU_REC}).batch
    assert sum(it.count for it in batch) == GPU_REC.max_batch_size
    assert len({it.page for it in batch}) == 16
    # Exact mode: each page's chunk has its own padded width, so no two pages share a batch.
    exact = BatchPolicy(_queues())
    for page in range(20):
        crops = [_crop(220 + page + k, seed=page * 10 + k) for k in range(6)]
        for chunk in plan_rec_chunks(crops, RecParams()):
            exact.submit(_item(loop, "rec", chunk.tensor.shape, f"p{page}"), now=0.0)
    batch = exact.select(0.0, ["rec"], {"rec": GPU_REC}).batch
    assert len({it.page for it in batch}) == 1
    assert sum(it.count for it in batch) == 6


def test_det_pages_of_different_sizes_share_a_bucket(loop: asyncio.AbstractEventLoop) -> None:
    sizes = [(1651, 1275), (1644, 1271), (1600, 1240)]  # pages at 150 dpi
    bucketed = DetParams(pad_step_px=128)
    inputs = [steps.prepare(np.zeros((h, w, 3), np.uint8), bucketed).inputs[0] for h, w in sizes]
    assert {x.shape for x in inputs} == {(1, 3, 1664, 1280)}
    policy = BatchPolicy(_queues())
    for k, x in enumerate(inputs):
        policy.submit(_item(loop, "det", x.shape, f"p{k}"), now=0.0)
    batch = policy.select(0.0, ["det"], {"det": GPU_DET}).batch
    assert [it.page for it in batch] == ["p0", "p1", "p2"]
    exact = [steps.prepare(np.zeros((h, w, 3), np.uint8), DetParams()).inputs[0] for h, w in sizes]
    assert len({x.shape for x in exact}) == 3  # exact mode: one page a batch


def test_the_padded_map_is_cropped_back_before_postprocessing() -> None:
    params = RecParams()
    image = np.full((300, 500, 3), 255, np.uint8)
    exact_step = steps.prepare(image, DetParams())
    padded_step = steps.prepare(image, DetParams(pad_step_px=128))
    _, _, h, w = exact_step.inputs[0].shape
    assert padded_step.inputs[0].shape == (1, 3, 384, 512)
    assert np.array_equal(padded_step.inputs[0][0, :, :h, :w], exact_step.inputs[0][0])
    assert not padded_step.inputs[0][0, :, h:, :].any()
    prob = np.zeros((1, h, w), np.float32)
    prob[0, 100:130, 50:300] = 0.9  # one line
    padded_prob = np.ones((1, 384, 512), np.float32)  # anything in the padding is ignored
    padded_prob[:, :h, :w] = prob
    exact = steps.after_det(exact_step.state, image, [prob], DetParams(), params, None)
    padded = steps.after_det(
        padded_step.state, image, [padded_prob], DetParams(pad_step_px=128), params, None
    )
    assert len(exact.state.polys) == 1
    assert np.array_equal(exact.state.polys, padded.state.polys)
