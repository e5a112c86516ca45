"""The predictor seam: what a GPU or CPU worker needs from a loaded model."""

from __future__ import annotations

from typing import Protocol

import numpy as np


class Predictor(Protocol):
    """One model on one device. Implementations: `PaddlePredictor`, `FakePredictor`.

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
