"""Paddle Inference as an engine backend: `PaddlePredictor` on CPU, `GpuPredictor` on a GPU."""

from __future__ import annotations

from models.base import EngineBackend, Predictor
from models.engine_options import EngineOptions
from models.gpu_predictor import GpuPredictor
from models.paddle_convert import prepare_paddle
from models.paddle_predictor import PaddlePredictor
from models.spec import ModelSpec


def create_paddle_predictor(spec: ModelSpec, options: EngineOptions) -> Predictor:
    """A Paddle Inference predictor for `spec` on `options.device`.

    On a GPU it runs on its worker's lane: the instance's streams and page-locked slots
    (`GpuPredictor`); TensorRT profiles are sized for `options.trt_max_batch_size` rows.
    """
    if options.is_gpu:
        return GpuPredictor(spec, options)
    return PaddlePredictor(spec, options)


PADDLE = EngineBackend(
    name="paddle",
    devices=frozenset({"cpu", "gpu"}),
    formats=frozenset({"paddle"}),
    create=create_paddle_predictor,
    prepare=prepare_paddle,
)
"""Paddle Inference (paddlepaddle or paddlepaddle-gpu), PaddleX's configuration; ONNX models
(PP-OCRv6 small) through their X2Paddle conversions (`make convert-paddle`)."""
