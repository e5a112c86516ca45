"""A predictor factory for device workers: real Paddle det/rec, fake stages where asked.

Device workers import the factory by path (`WorkerSetup.predictor_factory`), so the behaviour is
chosen with environment variables that the spawned processes inherit:
  OCR_FAKE_CLS_CLASS=N   the textline classifier answers class N for every crop;
  OCR_FAKE_REC_FAIL=TEXT rec raises for any batch wider than TEXT pixels (a "bad crop").
`fake_predictor` uses no model at all (`models.FakePredictor`):
  OCR_FAKE_LATENCY_S=S   every batch takes S seconds (the warm-up page's too).
"""

from __future__ import annotations

import os
from typing import Any, cast

import numpy as np

from models.fake_predictor import FakePredictor
from models.paddle_predictor import EngineOptions
from models.spec import ModelKind
from serving.engine import create_predictor as real_predictor


class FakeCls:
    """Answers one class for every crop."""

    def __init__(self, class_id: int, classes: int = 2) -> None:
        self.class_id = class_id
        self.classes = classes

    def load(self) -> None:
        return None

    def warmup(self) -> None:
        return None

    def run(self, batch: np.ndarray) -> np.ndarray:
        probs = np.zeros((batch.shape[0], self.classes), dtype=np.float32)
        probs[:, self.class_id] = 1.0
        return probs

    def close(self) -> None:
        return None


class FailingWide:
    """Wraps a real predictor; raises on batches wider than a limit."""

    def __init__(self, inner: Any, max_width: int) -> None:
        self.inner = inner
        self.max_width = max_width

    def load(self) -> None:
        self.inner.load()

    def warmup(self) -> None:
        self.inner.warmup()

    def run(self, batch: np.ndarray) -> np.ndarray:
        if batch.shape[-1] > self.max_width:
            raise RuntimeError(f"injected failure on width {batch.shape[-1]}")
        result: np.ndarray = self.inner.run(batch)
        return result

    def close(self) -> None:
        self.inner.close()


def create_predictor(
    stage: str, model_dir: str, engine: EngineOptions, device: str, max_rows: int
) -> Any:
    """`serving.engine.create_predictor`, with the fakes the environment asks for."""
    if stage == "cls" and "OCR_FAKE_CLS_CLASS" in os.environ:
        return FakeCls(int(os.environ["OCR_FAKE_CLS_CLASS"]))
    predictor = real_predictor(stage, model_dir, engine, device, max_rows)
    if stage == "rec" and "OCR_FAKE_REC_FAIL" in os.environ:
        return FailingWide(predictor, int(os.environ["OCR_FAKE_REC_FAIL"]))
    return predictor


def fake_predictor(
    stage: str, model_dir: str, engine: EngineOptions, device: str, max_rows: int
) -> FakePredictor:
    """Model-free predictors, slowed down by `OCR_FAKE_LATENCY_S`: server lifecycle tests."""
    latency_s = float(os.environ.get("OCR_FAKE_LATENCY_S", "0"))
    return FakePredictor(cast(ModelKind, stage), latency_s=latency_s)
