"""OCR callables for the accuracy harness: our engine in process (`python -m loadtest.accuracy
--ocr loadtest.engines:ours`) beside PaddleOCR's own pipeline (`tests.reference:reference_ocr`)."""

from __future__ import annotations

import functools

import numpy as np

from serving.config import AppConfig
from serving.engine.local import LocalEngine


@functools.cache
def _engine() -> LocalEngine:
    engine = LocalEngine(AppConfig())
    engine.load()
    return engine


def ours(image: np.ndarray) -> list[str]:
    """Our pipeline and predictors, in this process, with the default configuration."""
    return [line.text for line in _engine().ocr(image).lines]
