"""A deterministic stand-in for real predictors, and the "fake" engine backend that serves it.

For unit, scheduling and server lifecycle tests and dry runs: `[engine] cpu_backend = "fake"`
runs the server without loading any model.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

import numpy as np

from models.base import EngineBackend, PredictorError, PredictorNotLoadedError
from models.engine_options import DEVICE_KINDS, EngineOptions
from models.spec import MODEL_FORMATS, ModelKind, ModelSpec
from pipelines.rec_postprocess import argmax_pairs

PP_OCRV5_REC_CLASSES = 18385
"""CTC blank + 18383 characters of PP-OCRv5's dict + the space PaddleOCR appends."""


class FakePredictor:
    """Returns model-shaped outputs without a model; see `models.base.Predictor`.

    - det: an (N, 1, H, W) probability map, `det_prob` inside one rectangle and
      `det_background` elsewhere.
    - rec: (N, W // 8, num_classes) softmax-like rows whose CTC greedy decode is `rec_indices`
      (each index followed by a blank step, so repeated characters survive).
    - cls, ori: (N, num_classes) rows selecting `cls_class`.

    Args:
        kind: "det", "rec", "cls" or "ori".
        det_box: (x0, y0, x1, y1) in input pixels, end-exclusive; None puts the rectangle at
            x in [W/4, 3W/4) and y in [H/4, H/2).
        det_prob: map value inside the rectangle.
        det_background: map value outside it.
        rec_indices: class indices to emit (1-based: 0 is the CTC blank).
        rec_prob: probability of the selected class at each step.
        num_classes: rec or cls classes; defaults to 18385 (rec), 2 (cls) or 4 (ori).
        cls_class: class id selected for every cls row.
        latency_s: sleep per `run()` call.
        latency_per_item_s: extra sleep per batch item.
        fail_on: called with each batch; when it returns True, `run()` raises PredictorError.
    """

    reads_text = False
    """Model-free: the server does not check its warm-up page's text (`serving.engine.warmup`)."""

    def __init__(
        self,
        kind: ModelKind,
        *,
        det_box: tuple[int, int, int, int] | None = None,
        det_prob: float = 0.9,
        det_background: float = 0.0,
        rec_indices: Sequence[int] = (1,),
        rec_prob: float = 0.95,
        num_classes: int | None = None,
        cls_class: int = 0,
        latency_s: float = 0.0,
        latency_per_item_s: float = 0.0,
        fail_on: Callable[[np.ndarray], bool] | None = None,
    ) -> None:
        if kind not in ("det", "rec", "cls", "ori"):
            raise ValueError(f"kind must be 'det', 'rec', 'cls' or 'ori', got {kind!r}")
        default_classes = {"rec": PP_OCRV5_REC_CLASSES, "ori": 4}.get(kind, 2)
        self.kind: ModelKind = kind
        self.num_classes = default_classes if num_classes is None else num_classes
        if kind == "rec" and any(not 0 <= i < self.num_classes for i in rec_indices):
            raise ValueError(f"rec_indices must lie in [0, {self.num_classes})")
        if kind in ("cls", "ori") and not 0 <= cls_class < self.num_classes:
            raise ValueError(f"cls_class must lie in [0, {self.num_classes})")
        if latency_s < 0 or latency_per_item_s < 0:
            raise ValueError("latencies must be >= 0")
        self.det_box = det_box
        self.det_prob = det_prob
        self.det_background = det_background
        self.rec_indices = tuple(rec_indices)
        self.rec_prob = rec_prob
        self.cls_class = cls_class
        self.latency_s = latency_s
        self.latency_per_item_s = latency_per_item_s
        self.fail_on = fail_on
        self.calls = 0
        """Number of `run()` calls, warm-up included."""
        self.batch_shapes: list[tuple[int, ...]] = []
        """Shapes of every batch `run()` received, in order."""
        self._loaded = False
        self._lock = threading.Lock()
        self._argmax = False

    def output_argmax(self) -> None:
        """Answer rec batches with the argmax pairs of the output above, as an engine that
        reduces on the device does (`models.base.ArgmaxOutput`), at no cost per class."""
        self._argmax = True

    @property
    def loaded(self) -> bool:
        """Whether `load()` has run and `close()` has not."""
        return self._loaded

    def load(self) -> None:
        """Mark the predictor usable."""
        self._loaded = True

    def warmup(self) -> None:
        """Run one small input."""
        width = 320 if self.kind == "rec" else 64
        height = 48 if self.kind == "rec" else 64
        self.run(np.zeros((1, 3, height, width), dtype=np.float32))

    def close(self) -> None:
        """Mark the predictor unusable."""
        self._loaded = False

    def run(self, batch: np.ndarray) -> np.ndarray:
        """Return the configured output for `batch` after the configured latency.

        Raises:
            PredictorNotLoadedError: before `load()` or after `close()`.
            ValueError: the batch is not 4-D.
            PredictorError: `fail_on(batch)` returned True.
        """
        if not self._loaded:
            raise PredictorNotLoadedError(f"fake {self.kind} predictor is not loaded")
        if batch.ndim != 4:
            raise ValueError(f"expected an NCHW batch, got shape {batch.shape}")
        with self._lock:
            self.calls += 1
            self.batch_shapes.append(tuple(batch.shape))
        delay_s = self.latency_s + self.latency_per_item_s * batch.shape[0]
        if delay_s > 0:
            time.sleep(delay_s)
        if self.fail_on is not None and self.fail_on(batch):
            raise PredictorError(f"fake {self.kind} predictor failed on shape {batch.shape}")
        n, _, height, width = batch.shape
        if self.kind == "det":
            return self._det_output(n, height, width)
        if self.kind == "rec":
            return self._rec_output(n, width)
        return self._cls_output(n)

    def _det_output(self, n: int, height: int, width: int) -> np.ndarray:
        out = np.full((n, 1, height, width), self.det_background, dtype=np.float32)
        if self.det_box is None:
            x0, y0, x1, y1 = width // 4, height // 4, (3 * width) // 4, height // 2
        else:
            x0, y0, x1, y1 = self.det_box
        out[:, :, max(y0, 0) : min(y1, height), max(x0, 0) : min(x1, width)] = self.det_prob
        return out

    def _rec_output(self, n: int, width: int) -> np.ndarray:
        steps = max(width // 8, 1)
        classes = np.zeros(steps, dtype=np.int64)  # blank everywhere by default
        for k, index in enumerate(self.rec_indices):
            if 2 * k >= steps:
                break
            classes[2 * k] = index
        rest = (1.0 - self.rec_prob) / max(self.num_classes - 1, 1)
        if self._argmax and np.float32(self.rec_prob) > np.float32(rest):
            pairs = np.stack([classes.astype(np.float32), np.full(steps, self.rec_prob)], axis=-1)
            return np.repeat(pairs[np.newaxis].astype(np.float32), n, axis=0)
        row = np.full((steps, self.num_classes), rest, dtype=np.float32)
        row[np.arange(steps), classes] = self.rec_prob
        out = np.repeat(row[np.newaxis], n, axis=0)
        if self._argmax:
            return argmax_pairs(out)
        return out

    def _cls_output(self, n: int) -> np.ndarray:
        rest = (1.0 - 0.9) / max(self.num_classes - 1, 1)
        out = np.full((n, self.num_classes), rest, dtype=np.float32)
        out[:, self.cls_class] = 0.9
        return out


def create_fake_predictor(spec: ModelSpec, options: EngineOptions) -> FakePredictor:
    """A fake shaped like `spec`'s model (its label count), on any device; nothing is loaded."""
    num_classes = None
    if spec.kind == "rec":
        num_classes = len(spec.character_dict) + 2  # the CTC blank and the space PaddleOCR adds
    elif spec.cls_params is not None:
        num_classes = len(spec.cls_params.labels)
    elif spec.ori_params is not None:
        num_classes = len(spec.ori_params.labels)
    return FakePredictor(spec.kind, num_classes=num_classes)


FAKE = EngineBackend(
    name="fake",
    devices=frozenset(DEVICE_KINDS),
    formats=frozenset(MODEL_FORMATS),
    create=create_fake_predictor,
)
"""Model-shaped answers without a model: dry runs and tests."""
