"""The predictor side of a lane: what the torch and Paddle GPU engines share.

An engine that runs on its worker's `models.staging.Lane` supplies how one batch runs on the
device (`_forward`, issued on the lane's compute stream) and, at load, its lane; this base gives
it the staged interface device workers pipeline with (`stage`, `launch`), the synchronous
`run`, the warm-up, and the recogniser's device-side argmax switch (`models.base.ArgmaxOutput`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from models.base import PredictorError, SpecPredictor, not_loaded
from models.engine_options import EngineOptions
from models.paddle_predictor import warmup_shape
from models.spec import ModelSpec
from models.staging import Lane, Slot


class LanePredictor(SpecPredictor):
    """A predictor whose batches run on a lane; see `models.base.Predictor` and
    `models.staging.StagedPredictor`. Subclasses set `_lane` in `load()` and define
    `_forward(x)`: the model on a device input, returning its device output (argmax pairs of
    the last axis when `_argmax` is set)."""

    def __init__(self, spec: ModelSpec, options: EngineOptions) -> None:
        super().__init__(spec, options)
        self._lane: Lane | None = None
        self._argmax = False

    def _forward(self, x: Any) -> Any:
        raise NotImplementedError

    @property
    def output_dtype(self) -> type[np.generic]:
        """What `_forward` answers: float32 (a torch detector's byte map: uint8)."""
        return np.float32

    def output_argmax(self) -> None:
        """Answer with the argmax pairs of the output's last axis, computed on the device
        (`models.base.ArgmaxOutput`)."""
        self._argmax = True

    @property
    def lane(self) -> Lane:
        """The lane its batches run on: its worker's, shared with the worker's other predictors
        (`inflight_batches` launched and one being collated, all stages together)."""
        return self._ready_lane()

    def _ready_lane(self) -> Lane:
        if self._lane is None:
            raise not_loaded(self.spec)
        return self._lane

    def _failed(self, shape: tuple[int, ...], err: Exception) -> PredictorError:
        return PredictorError(
            f"{self.spec.kind} model {self.spec.model_name} failed on input shape {shape} "
            f"on {self.options.device}: {err}"
        )

    def stage(self, shape: tuple[int, ...]) -> Slot:
        """A page-locked slot to collate a batch of `shape` into (then `launch` it)."""
        if len(shape) != 4:
            raise ValueError(f"expected an NCHW batch, got shape {shape}")
        return self._ready_lane().stage(shape)

    def launch(self, slot: Slot) -> None:
        """Issue the slot's copy in, the model and the copy out; returns without waiting."""
        lane = self._ready_lane()
        try:
            lane.launch(slot, self._forward, self.output_dtype)
        except Exception as err:
            raise self._failed(slot.input.shape, err) from err

    def run(self, batch: np.ndarray) -> np.ndarray:
        """Run one NCHW batch and wait for it; returns a fresh array."""
        lane = self._ready_lane()
        if batch.ndim != 4:
            raise ValueError(f"expected an NCHW batch, got shape {batch.shape}")
        try:
            return lane.run(batch, self._forward, self.output_dtype)
        except Exception as err:
            raise self._failed(batch.shape, err) from err

    def warmup(self) -> None:
        """Run one small zero input."""
        self.run(np.zeros(warmup_shape(self.spec), dtype=np.float32))
