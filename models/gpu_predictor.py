"""A Paddle Inference predictor on one GPU, with its own CUDA stream and pinned-memory staging.

Per batch: the numpy input is copied into page-locked host memory (`paddle.CUDAPinnedPlace`),
copied to the device asynchronously on the instance's stream, run with `predictor.run([tensor])`
on that same stream, and the output is copied back to numpy before the next run, because the
tensors `run()` returns alias the predictor's memory. Written against Paddle's documented Python
API (paddle.device.Stream, paddle.device.stream_guard, paddle.to_tensor(place=...),
Tensor.cuda(device_id, blocking), Config.set_exec_stream, Predictor.run(list[Tensor])); tested
here with a fake `paddle` module that checks the calls and their order, and on a GPU by
tests/gpu/.
"""

from __future__ import annotations

import importlib
import logging
from types import ModuleType
from typing import Any

import numpy as np

from models.base import PredictorError, PredictorNotLoadedError
from models.engine_options import EngineOptions
from models.paddle_predictor import build_config
from models.spec import ModelSpec

logger = logging.getLogger(__name__)


class GpuPredictor:
    """One predictor instance on one GPU; see `models.base.Predictor`.

    Each instance owns its stream and its staging buffer: give every instance (a clone, a
    process) its own, never share one between threads.
    """

    def __init__(
        self, spec: ModelSpec, options: EngineOptions, paddle: ModuleType | None = None
    ) -> None:
        if not options.is_gpu:
            raise PredictorError(f"GpuPredictor needs a gpu:N device, got {options.device}")
        self._spec = spec
        self._options = options
        self._paddle = paddle
        self._predictor: Any = None
        self._stream: Any = None
        self._pinned_place: Any = None
        self._staged: Any = None
        self._shared_stream = False

    @property
    def spec(self) -> ModelSpec:
        """The model this predictor runs."""
        return self._spec

    @property
    def options(self) -> EngineOptions:
        """The engine settings."""
        return self._options

    def load(self) -> None:
        """Create the stream and the predictor bound to it; a second call does nothing."""
        if self._predictor is not None:
            return
        paddle = self._paddle if self._paddle is not None else importlib.import_module("paddle")
        self._paddle = paddle
        device = f"gpu:{self._options.device_id}"
        self._stream = paddle.device.Stream(device=device)
        self._pinned_place = paddle.CUDAPinnedPlace()
        config = build_config(self._spec, self._options, paddle.inference)
        # CUDA builds only: run the predictor on our stream so the async copy is ordered before
        # it. Without it the copy is synchronised explicitly in run().
        set_exec_stream = getattr(config, "set_exec_stream", None)
        if callable(set_exec_stream):
            set_exec_stream(self._stream.stream_base)
            self._shared_stream = True
        try:
            self._predictor = paddle.inference.create_predictor(config)
        except Exception as err:  # Paddle raises bare RuntimeError subclasses
            raise PredictorError(
                f"cannot load {self._spec.kind} model {self._spec.directory} on {device}: {err}"
            ) from err
        logger.info(
            "loaded %s model=%s device=%s precision=%s trt=%s own_stream=%s",
            self._spec.kind,
            self._spec.model_name,
            device,
            self._options.precision,
            self._options.use_tensorrt,
            self._shared_stream,
        )

    def run(self, batch: np.ndarray) -> np.ndarray:
        """Stage, copy, run and copy back one NCHW batch."""
        if self._predictor is None or self._paddle is None:
            raise PredictorNotLoadedError(f"{self._spec.kind} GPU predictor is not loaded")
        if batch.ndim != 4:
            raise ValueError(f"expected an NCHW batch, got shape {batch.shape}")
        paddle = self._paddle
        data = np.ascontiguousarray(batch, dtype=np.float32)
        try:
            with paddle.device.stream_guard(self._stream):
                # Page-locked staging, owned by this instance until the next batch replaces it;
                # Paddle's pinned allocator pools the memory between batches.
                self._staged = paddle.to_tensor(data, place=self._pinned_place)
                on_device = self._staged.cuda(self._options.device_id, blocking=False)
                if not self._shared_stream:
                    self._stream.synchronize()
                outputs = self._predictor.run([on_device])
                # The outputs alias predictor memory: copy out before the next run.
                result: np.ndarray = np.array(outputs[0].numpy(), copy=True)
        except Exception as err:
            raise PredictorError(
                f"{self._spec.kind} model {self._spec.model_name} failed on input shape "
                f"{data.shape} on {self._options.device}: {err}"
            ) from err
        return result

    def warmup(self) -> None:
        """Run one small zero input."""
        from models.paddle_predictor import warmup_shape

        self.run(np.zeros(warmup_shape(self._spec), dtype=np.float32))

    def close(self) -> None:
        """Release the predictor, its stream and staging buffer."""
        self._predictor = None
        self._staged = None
        self._stream = None
