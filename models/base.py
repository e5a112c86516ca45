"""The engine seam: what a device worker needs from a loaded model, and from an engine backend."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from models.engine_options import DeviceKind, EngineOptions
from models.spec import ModelFormat, ModelSpec


class Predictor(Protocol):
    """One model on one device. Implementations: `PaddlePredictor`, `GpuPredictor`,
    `FakePredictor`.

    Not thread-safe: use one instance per thread or process. Lifecycle: construct (no work),
    `load()`, `warmup()`, any number of `run()` calls, `close()`.
    """

    def load(self) -> None:
        """Create the underlying engine; idempotent."""
        ...

    def warmup(self) -> None:
        """Run one small valid input so the first real request does not pay for setup."""
        ...

    def run(self, batch: np.ndarray) -> np.ndarray:
        """Run one batch (float32, NCHW) and return the model's first output as a fresh array."""
        ...

    def close(self) -> None:
        """Release the engine; idempotent."""
        ...


class PredictorError(RuntimeError):
    """A predictor could not be loaded or could not run a batch."""


class PredictorNotLoadedError(PredictorError):
    """`run()` or `warmup()` was called before `load()` or after `close()`."""


class EngineBackendError(ValueError):
    """An unknown engine backend, or one asked for a device or model format it does not serve."""


PredictorFactory = Callable[[ModelSpec, EngineOptions], Predictor]
"""Builds an unloaded predictor for a model and the options of one device (no work: `load()`)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineBackend:
    """An inference engine device workers can run models on, as listed in `models.registry`.

    A new engine is one module (its `Predictor` class and an `EngineBackend` constant) and one
    entry in `models.registry.BACKENDS`.
    """

    name: str
    """The name `[engine] cpu_backend` and `gpu_backend` use."""
    devices: frozenset[DeviceKind]
    """Device kinds it runs on."""
    formats: frozenset[ModelFormat]
    """Model formats it reads."""
    create: PredictorFactory

    def predictor(self, spec: ModelSpec, options: EngineOptions) -> Predictor:
        """An unloaded predictor for `spec` on `options.device`.

        Raises:
            EngineBackendError: the backend does not run on that device kind or does not read
                the model's format.
        """
        if options.kind not in self.devices:
            raise EngineBackendError(
                f"engine backend {self.name!r} does not run on {options.kind} devices "
                f"({options.device})"
            )
        if spec.format not in self.formats:
            raise EngineBackendError(
                f"engine backend {self.name!r} does not read {spec.format} models "
                f"({spec.directory})"
            )
        return self.create(spec, options)
