"""A Paddle Inference predictor on one GPU, pipelined on its worker's lane.

Paddle on a GPU follows the same data path as the torch engine (`models.staging`): each device
worker process (one instance) owns a lane of three streams (copy in, compute, copy out) and
page-locked slots, shared by its det/cls/rec predictors, which all run on the lane's compute
stream (`Config.set_exec_stream`). A batch is collated straight into a slot's page-locked input,
copied to the GPU without blocking, run with `predictor.run([tensor])`, and its output copied
out of the predictor's memory on the GPU (the tensors `run()` returns alias memory that the next
run overwrites) and then to the slot's page-locked output; the worker launches the next batch
before it waits for this one. A recogniser answers with each step's best class and its
probability, reduced on the GPU (`output_argmax`). Written against Paddle 3.2's documented
Python API (`models.paddle_device`); tested here with a fake `paddle` module that checks the
calls, their streams and their order, on Paddle's CPU build for the host-side parts, and on a
GPU by tests/gpu/.
"""

from __future__ import annotations

import importlib
import logging
from types import ModuleType
from typing import Any

from models.base import PredictorError
from models.engine_options import EngineOptions
from models.lane_predictor import LanePredictor
from models.paddle_device import detached_output, paddle_lane
from models.paddle_predictor import build_config
from models.spec import ModelSpec

logger = logging.getLogger(__name__)


class GpuPredictor(LanePredictor):
    """One predictor on one GPU; see `models.lane_predictor.LanePredictor`."""

    def __init__(
        self, spec: ModelSpec, options: EngineOptions, paddle: ModuleType | None = None
    ) -> None:
        if not options.is_gpu:
            raise PredictorError(f"GpuPredictor needs a gpu:N device, got {options.device}")
        super().__init__(spec, options)
        self._paddle: Any = paddle
        self._predictor: Any = None

    def load(self) -> None:
        """Create the predictor on its lane's compute stream; a second call does nothing."""
        if self._predictor is not None:
            return
        paddle = self._paddle if self._paddle is not None else importlib.import_module("paddle")
        self._paddle = paddle
        device = f"gpu:{self.options.device_id}"
        config = build_config(self.spec, self.options, paddle.inference)
        set_exec_stream = getattr(config, "set_exec_stream", None)
        if not callable(set_exec_stream):
            raise PredictorError(
                f"this Paddle build cannot run a predictor on a given stream "
                f"(Config.set_exec_stream); install Paddle's GPU build to serve on {device}"
            )
        try:
            options = self.options
            lane = paddle_lane(paddle, options.device_id, inflight_batches=options.inflight_batches)
            set_exec_stream(lane.compute_stream.stream_base)
            self._predictor = paddle.inference.create_predictor(config)
        except Exception as err:  # Paddle raises bare RuntimeError subclasses
            raise PredictorError(
                f"cannot load {self.spec.kind} model {self.spec.directory} on {device}: {err}"
            ) from err
        self._lane = lane
        logger.info(
            "loaded %s model=%s device=%s precision=%s trt=%s",
            self.spec.kind,
            self.spec.model_name,
            device,
            self.options.precision,
            self.options.use_tensorrt,
        )

    def _forward(self, x: Any) -> Any:
        outputs = self._predictor.run([x])
        return detached_output(self._paddle, outputs[0], argmax=self._argmax)

    def close(self) -> None:
        """Release the predictor (the lane stays with the process)."""
        self._predictor = None
        self._lane = None
