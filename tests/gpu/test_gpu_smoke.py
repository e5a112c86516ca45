"""On a GPU with a GPU build of Paddle: the GPU data path reads the same text as the CPU."""

from __future__ import annotations

import numpy as np
import pytest

from models.staging import StagedPredictor
from serving.config import AppConfig, build
from serving.engine.choice import engine_choice
from serving.engine.local import LocalEngine, ocr_page
from serving.engine.warmup import WARMUP_TEXT, warmup_image
from serving.request_options import ocr_options


def _gpu_count() -> int:
    try:
        import paddle
    except ImportError:
        return 0
    if not paddle.is_compiled_with_cuda():
        return 0
    return int(paddle.device.cuda.device_count())


pytestmark = pytest.mark.skipif(
    _gpu_count() == 0,
    reason="not applicable: needs a GPU build of Paddle (the GPU bundle carries none)",
)

PADDLE = {"engine": {"gpu_backend": "paddle"}}
"""Paddle on the GPU, whatever else is installed ("auto", the default, takes torch first)."""


def test_gpu_predictors_read_the_warmup_page_like_the_cpu() -> None:
    config = build(AppConfig, PADDLE)
    cpu = LocalEngine(config)
    cpu.load()
    engine = engine_choice(config, "gpu:0")
    specs = cpu.bundle.specs
    gpu = {stage: engine.predictor(specs[stage], max_batch_rows=8) for stage in ("det", "rec")}
    for predictor in gpu.values():
        predictor.load()
    page_options = ocr_options(cpu.bundle, config.pipeline)
    gpu_page = ocr_page(gpu, warmup_image(), page_options, cpu.bundle.charset)
    cpu_page = cpu.ocr(warmup_image())
    assert [line.text for line in gpu_page.lines] == list(WARMUP_TEXT)
    assert [line.text for line in gpu_page.lines] == [line.text for line in cpu_page.lines]
    # Repeated batches keep giving the same answer (outputs copied out before the next run).
    for _ in range(20):
        again = ocr_page(gpu, warmup_image(), page_options, cpu.bundle.charset)
        assert [line.text for line in again.lines] == [line.text for line in gpu_page.lines]


def test_two_batches_in_flight_on_one_lane_answer_as_one_at_a_time() -> None:
    config = build(AppConfig, PADDLE)
    cpu = LocalEngine(config)
    cpu.load()
    predictor = engine_choice(config, "gpu:0").predictor(cpu.bundle.specs["rec"], max_batch_rows=8)
    predictor.load()
    assert isinstance(predictor, StagedPredictor)
    rng = np.random.default_rng(5)
    batches = [rng.uniform(-1.0, 1.0, (4, 3, 48, 320)).astype(np.float32) for _ in range(2)]
    expected = [predictor.run(batch) for batch in batches]
    slots = []
    for batch in batches:  # the second launched before the first is waited for
        slot = predictor.stage(batch.shape)
        slot.input[...] = batch
        predictor.launch(slot)
        slots.append(slot)
    for slot, want in zip(slots, expected, strict=True):
        assert np.allclose(slot.result(), want, atol=1e-5)
        slot.release()
