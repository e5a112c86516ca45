"""What the ONNX engines share: the predictors' lifecycle, input checks and error wrapping, and
the backend entry (`cpu_onnx_backend`).

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

from models.base import (
    EngineBackend,
    PredictorError,
    SpecPredictor,
    batch_failed,
    nchw_batch,
    not_loaded,
)
from models.convert import prepare_onnx
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


class OnnxPredictor(SpecPredictor):
    """One ONNX model on the CPU; see `models.base.Predictor`. Subclasses implement `_open()`.

    Not thread-safe: one instance per thread or process.
    """

    engine = "onnx"
    """The engine's name, for messages."""

    def __init__(self, spec: ModelSpec, options: EngineOptions) -> None:
        if spec.onnx_file is None:
            raise PredictorError(f"{spec.directory} holds no ONNX model ({engine_name(self)})")
        super().__init__(spec, options)
        self._run: BatchRunner | None = None

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
        return self._run_with(self._run, batch)

    def _run_with(self, runner: BatchRunner | None, batch: np.ndarray) -> np.ndarray:
        """`run` with `runner` (None: not loaded)."""
        if runner is None:
            raise not_loaded(self._spec)
        data = nchw_batch(batch)
        try:
            return runner(data)
        except Exception as err:  # engines raise their own RuntimeError subclasses
            raise batch_failed(self._spec, data, err, f" ({engine_name(self)})") from err

    def warmup(self) -> None:
        """Run one small zero input of a shape the model accepts."""
        self.run(np.zeros(warmup_shape(self._spec), dtype=np.float32))

    def close(self) -> None:
        """Drop the engine's session; a second call does nothing."""
        self._run = None


def engine_name(predictor: OnnxPredictor) -> str:
    """The predictor's engine, for messages."""
    return type(predictor).engine


def cpu_onnx_backend(predictor: type[OnnxPredictor]) -> EngineBackend:
    """The backend named after `predictor.engine` that runs it on the CPU, on ONNX models and
    Paddle models' conversions."""
    return EngineBackend(
        name=predictor.engine,
        devices=frozenset({"cpu"}),
        formats=frozenset({"onnx"}),
        create=predictor,
        prepare=prepare_onnx,
    )
