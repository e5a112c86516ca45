"""What the ONNX engines' predictors share: the lifecycle, input checks and error wrapping.

An engine (`models.onnxruntime_backend`, `models.openvino_backend`) supplies `_open()`, which
loads `spec.onnx_file` and returns the function that runs one batch. The engine package is
imported there, lazily, so importing a backend stays cheap where the engine is not installed.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import numpy as np

from models.base import PredictorError, PredictorNotLoadedError
from models.engine_options import EngineOptions
from models.paddle_predictor import warmup_shape
from models.spec import ModelSpec

BatchRunner = Callable[[np.ndarray], np.ndarray]
"""Runs one contiguous float32 NCHW batch; returns the model's first output as a fresh array."""


def import_engine(module: str, extra: str) -> ModuleType:
    """Import an engine package, or say which extra installs it.

    Raises:
        PredictorError: the package is not installed.
    """
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise PredictorError(
            f"{module} is not installed: pip install -e '.[{extra}]' (pinned in pyproject.toml)"
        ) from err


class OnnxPredictor:
    """One ONNX model on the CPU; see `models.base.Predictor`. Subclasses implement `_open()`.

    Not thread-safe: one instance per thread or process.
    """

    engine = "onnx"
    """The engine's name, for messages."""

    def __init__(self, spec: ModelSpec, options: EngineOptions) -> None:
        if spec.onnx_file is None:
            raise PredictorError(f"{spec.directory} holds no ONNX model ({engine_name(self)})")
        self._spec = spec
        self._options = options
        self._run: BatchRunner | None = None

    @property
    def spec(self) -> ModelSpec:
        """The model this predictor runs (an ONNX spec)."""
        return self._spec

    @property
    def options(self) -> EngineOptions:
        """The engine settings."""
        return self._options

    @property
    def onnx_file(self) -> Path:
        """The ONNX graph it loads."""
        if self._spec.onnx_file is None:  # checked in __init__
            raise PredictorError(f"{self._spec.directory} holds no ONNX model")
        return self._spec.onnx_file

    @property
    def loaded(self) -> bool:
        """Whether `load()` has run and `close()` has not."""
        return self._run is not None

    def _open(self) -> BatchRunner:
        raise NotImplementedError

    def load(self) -> None:
        """Load the model; a second call does nothing.

        Raises:
            PredictorError: the engine is not installed, or cannot load the model.
        """
        if self._run is not None:
            return
        try:
            self._run = self._open()
        except PredictorError:
            raise
        except Exception as err:  # engines raise their own RuntimeError subclasses
            raise PredictorError(
                f"{engine_name(self)} cannot load {self._spec.kind} model {self.onnx_file}: {err}"
            ) from err

    def run(self, batch: np.ndarray) -> np.ndarray:
        """Run one NCHW batch and return the first output as a new array.

        Raises:
            PredictorNotLoadedError: before `load()` or after `close()`.
            ValueError: the batch is not 4-D.
            PredictorError: the engine failed on the batch.
        """
        if self._run is None:
            raise PredictorNotLoadedError(
                f"{self._spec.kind} predictor for {self._spec.directory} is not loaded"
            )
        if batch.ndim != 4:
            raise ValueError(f"expected an NCHW batch, got shape {batch.shape}")
        data = np.ascontiguousarray(batch, dtype=np.float32)
        try:
            return self._run(data)
        except Exception as err:  # engines raise their own RuntimeError subclasses
            raise PredictorError(
                f"{self._spec.kind} model {self._spec.model_name} failed on input shape "
                f"{data.shape} ({engine_name(self)}): {err}"
            ) from err

    def warmup(self) -> None:
        """Run one small zero input of a shape the model accepts."""
        self.run(np.zeros(warmup_shape(self._spec), dtype=np.float32))

    def close(self) -> None:
        """Drop the engine's session; a second call does nothing."""
        self._run = None


def engine_name(predictor: OnnxPredictor) -> str:
    """The predictor's engine, for messages."""
    return type(predictor).engine
