"""The real embedded PP-OCRv5 mobile models through PaddlePredictor on CPU."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from models.engine_options import EngineOptions
from models.paddle_predictor import PaddlePredictor, paddle_version
from models.spec import ModelSpec

pytestmark = pytest.mark.integration

REC_CLASSES = 18385  # blank + 18383 dict entries + space


def _det_input() -> np.ndarray:
    # "Zero-ish": a normalised near-black page with one brighter block, so the map is not flat.
    x = np.full((1, 3, 64, 96), -2.0, dtype=np.float32)
    x[:, :, 16:40, 16:80] = 1.5
    return x


def _rec_input() -> np.ndarray:
    rng = np.random.default_rng(7)
    return rng.uniform(-1.0, 1.0, size=(2, 3, 48, 320)).astype(np.float32)


def _loaded(spec: ModelSpec, *, mkldnn: bool) -> Iterator[PaddlePredictor]:
    predictor = PaddlePredictor(spec, EngineOptions(cpu_threads=2, enable_mkldnn=mkldnn))
    predictor.load()
    yield predictor
    predictor.close()


@pytest.fixture(scope="module")
def det_mkldnn(det_spec: ModelSpec) -> Iterator[PaddlePredictor]:
    yield from _loaded(det_spec, mkldnn=True)


@pytest.fixture(scope="module")
def det_plain(det_spec: ModelSpec) -> Iterator[PaddlePredictor]:
    yield from _loaded(det_spec, mkldnn=False)


@pytest.fixture(scope="module")
def rec_mkldnn(rec_spec: ModelSpec) -> Iterator[PaddlePredictor]:
    yield from _loaded(rec_spec, mkldnn=True)


@pytest.fixture(scope="module")
def rec_plain(rec_spec: ModelSpec) -> Iterator[PaddlePredictor]:
    yield from _loaded(rec_spec, mkldnn=False)


def test_paddle_version_is_reported() -> None:
    major, minor = (int(p) for p in paddle_version().split(".")[:2])
    assert (major, minor) >= (3, 2)


def test_det_output_is_a_probability_map(det_mkldnn: PaddlePredictor) -> None:
    det_mkldnn.warmup()
    out = det_mkldnn.run(_det_input())
    assert out.shape == (1, 1, 64, 96)
    assert out.dtype == np.float32
    assert np.all(np.isfinite(out))
    assert float(out.min()) >= 0.0
    assert float(out.max()) <= 1.0


def test_rec_output_is_per_step_softmax(rec_mkldnn: PaddlePredictor) -> None:
    rec_mkldnn.warmup()
    out = rec_mkldnn.run(_rec_input())
    assert out.shape == (2, 320 // 8, REC_CLASSES)
    assert float(out.min()) >= 0.0
    np.testing.assert_allclose(out.sum(axis=-1), 1.0, atol=1e-4)


def test_rec_time_steps_follow_width(rec_mkldnn: PaddlePredictor) -> None:
    for width in (160, 480, 1000):
        out = rec_mkldnn.run(np.zeros((1, 3, 48, width), dtype=np.float32))
        assert out.shape == (1, width // 8, REC_CLASSES), width


def test_outputs_do_not_alias_predictor_memory(rec_mkldnn: PaddlePredictor) -> None:
    x = _rec_input()
    first = rec_mkldnn.run(x)
    kept = first.copy()
    rec_mkldnn.run(-x)
    np.testing.assert_array_equal(first, kept)


def test_det_mkldnn_matches_plain_cpu(
    det_mkldnn: PaddlePredictor, det_plain: PaddlePredictor
) -> None:
    x = _det_input()
    with_mkldnn = det_mkldnn.run(x)
    without = det_plain.run(x)
    assert float(np.max(np.abs(with_mkldnn - without))) < 1e-4


def test_rec_mkldnn_matches_plain_cpu(
    rec_mkldnn: PaddlePredictor, rec_plain: PaddlePredictor
) -> None:
    x = _rec_input()
    with_mkldnn = rec_mkldnn.run(x)
    without = rec_plain.run(x)
    assert float(np.max(np.abs(with_mkldnn - without))) < 1e-3
    np.testing.assert_array_equal(with_mkldnn.argmax(-1), without.argmax(-1))
