"""Engine backends for tests: real Paddle det/rec with faults injected, and slow fakes.

Device workers are given a backend by import path (`Runtime.build(backend="module:attribute")`),
so the behaviour is chosen with environment variables that the spawned processes inherit.
`FAULTS` ("tests.fakes.predictors:FAULTS"):
  OCR_FAKE_CLS_CLASS=N   the textline classifier answers class N for every crop;
  OCR_FAKE_REC_FAIL=TEXT rec raises for any batch wider than TEXT pixels (a "bad crop").
`SLOW_FAKE` ("tests.fakes.predictors:SLOW_FAKE") uses no model at all (`models.FakePredictor`):
  OCR_FAKE_LATENCY_S=S   every batch takes S seconds (the warm-up page's too);
  OCR_FAKE_LATENCY_S_CPU / OCR_FAKE_LATENCY_S_GPU: the same per device kind (unlike devices).
`STACKED_LINES` ("tests.fakes.predictors:STACKED_LINES"): `SLOW_FAKE`'s predictors, but the
detector finds a line every `OCR_FAKE_LINE_PITCH_PX` (20) rows of its input, 5 rows tall: a page
of stacked lines, which the XY-cut (`pipelines.layout`) cuts off one at a time.
`CUDA_FAULT` ("tests.fakes.predictors:CUDA_FAULT"): `SLOW_FAKE`'s predictors, and a sticky
CUDA error once a file appears:
  OCR_FAKE_CUDA_FAULT_FILE=PATH the first batch to find PATH removes it and raises an illegal
  memory access; every later batch of that process raises it too (the context is lost), while
  a fresh process runs normally.
`PRECISION_FAKE` ("tests.fakes.predictors:PRECISION_FAKE"): model-free predictors that keep the
precision their options give (`PrecisionFake.ran_at`), for the warm-up's fallback to fp32.
"""

from __future__ import annotations

import os

import numpy as np

from models.base import EngineBackend, Predictor
from models.engine_options import DEVICE_KINDS, EngineOptions, device_kind
from models.fake_predictor import FakePredictor
from models.paddle_backend import PADDLE
from models.spec import MODEL_FORMATS, ModelKind, ModelSpec


class FakeCls:
    """Answers one class for every crop."""

    reads_text = False  # turned crops read wrong: the warm-up page's text is not checked

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

    def __init__(self, inner: Predictor, max_width: int) -> None:
        self.inner = inner
        self.max_width = max_width

    def load(self) -> None:
        self.inner.load()

    def warmup(self) -> None:
        self.inner.warmup()

    def run(self, batch: np.ndarray) -> np.ndarray:
        if batch.shape[-1] > self.max_width:
            raise RuntimeError(f"injected failure on width {batch.shape[-1]}")
        return self.inner.run(batch)

    def close(self) -> None:
        self.inner.close()


def _with_faults(spec: ModelSpec, options: EngineOptions) -> Predictor:
    """Paddle's predictors, with the fakes the environment asks for."""
    if spec.kind == "cls" and "OCR_FAKE_CLS_CLASS" in os.environ:
        return FakeCls(int(os.environ["OCR_FAKE_CLS_CLASS"]))
    predictor = PADDLE.predictor(spec, options)
    if spec.kind == "rec" and "OCR_FAKE_REC_FAIL" in os.environ:
        return FailingWide(predictor, int(os.environ["OCR_FAKE_REC_FAIL"]))
    return predictor


def _slow_fake(spec: ModelSpec, options: EngineOptions) -> Predictor:
    """Model-free predictors, slowed down by `OCR_FAKE_LATENCY_S`, or per device kind by
    `OCR_FAKE_LATENCY_S_CPU` / `OCR_FAKE_LATENCY_S_GPU` (unlike devices, no GPU needed)."""
    kind = device_kind(options.device).upper()
    default = os.environ.get("OCR_FAKE_LATENCY_S", "0")
    latency_s = float(os.environ.get(f"OCR_FAKE_LATENCY_S_{kind}", default))
    return FakePredictor(spec.kind, latency_s=latency_s)


class StackedLinesDet(FakePredictor):
    """A detector whose map has a 5-row stripe every `pitch_px` rows, across the middle half."""

    def __init__(self, pitch_px: int) -> None:
        super().__init__("det")
        self.pitch_px = pitch_px

    def _det_output(self, n: int, height: int, width: int) -> np.ndarray:
        out = np.zeros((n, 1, height, width), dtype=np.float32)
        for top in range(self.pitch_px // 2, height - 5, self.pitch_px):
            out[:, :, top : top + 5, width // 4 : (3 * width) // 4] = 0.9
        return out


def _stacked_lines(spec: ModelSpec, options: EngineOptions) -> Predictor:
    if spec.kind == "det":
        return StackedLinesDet(int(os.environ.get("OCR_FAKE_LINE_PITCH_PX", "20")))
    return FakePredictor(spec.kind)


FAULTS = EngineBackend(
    name="paddle-with-faults",
    devices=PADDLE.devices,
    formats=PADDLE.formats,
    create=_with_faults,
)
SLOW_FAKE = EngineBackend(
    name="slow-fake",
    devices=frozenset(DEVICE_KINDS),
    formats=frozenset(MODEL_FORMATS),
    create=_slow_fake,
)
STACKED_LINES = EngineBackend(
    name="stacked-lines",
    devices=frozenset(DEVICE_KINDS),
    formats=frozenset(MODEL_FORMATS),
    create=_stacked_lines,
)


class StickyCudaFault:
    """Wraps a predictor; after `OCR_FAKE_CUDA_FAULT_FILE` appears, every batch raises the
    error torch raises for an illegal memory access (`models.device_faults`)."""

    reads_text = False  # model-free (`SLOW_FAKE`): the warm-up page's text is not checked

    def __init__(self, inner: Predictor, trigger: str) -> None:
        self.inner = inner
        self.trigger = trigger
        self.faulted = False

    def load(self) -> None:
        self.inner.load()

    def warmup(self) -> None:
        self.inner.warmup()

    def run(self, batch: np.ndarray) -> np.ndarray:
        if not self.faulted and os.path.exists(self.trigger):
            os.remove(self.trigger)
            self.faulted = True
        if self.faulted:
            raise RuntimeError(
                "CUDA error: an illegal memory access was encountered\n"
                "CUDA kernel errors might be asynchronously reported at some other API call"
            )
        return self.inner.run(batch)

    def close(self) -> None:
        self.inner.close()


def _cuda_fault(spec: ModelSpec, options: EngineOptions) -> Predictor:
    return StickyCudaFault(_slow_fake(spec, options), os.environ["OCR_FAKE_CUDA_FAULT_FILE"])


CUDA_FAULT = EngineBackend(
    name="cuda-fault",
    devices=frozenset(DEVICE_KINDS),
    formats=frozenset(MODEL_FORMATS),
    create=_cuda_fault,
)


class PrecisionFake(FakePredictor):
    """A model-free predictor that keeps the precision its options give it (`ran_at`) and says it
    reads text, so that a device worker checks its warm-up page: for the fallback to fp32 of an
    "auto" half precision (`models.torch_precision`), with the page's text faked."""

    reads_text = True

    def __init__(self, kind: ModelKind, ran_at: str) -> None:
        super().__init__(kind)
        self.ran_at = ran_at


def _precision_fake(spec: ModelSpec, options: EngineOptions) -> Predictor:
    return PrecisionFake(spec.kind, options.precision)


PRECISION_FAKE = EngineBackend(
    name="precision-fake",
    devices=frozenset(DEVICE_KINDS),
    formats=frozenset(MODEL_FORMATS),
    create=_precision_fake,
)
