"""The detector's byte map (`pipelines.det_byte_map`): exact bitmap at its threshold, values
within 1/254, and DB post-processing that reads it as it reads the float map."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from pipelines import det_postprocess
from pipelines.det_byte_map import BYTE_MAP_SCALE, byte_map_level, quantize_map
from pipelines.stages import DET
from pipelines.types import DetParams

pytestmark = pytest.mark.unit


def _probabilities(thresh: float) -> np.ndarray:
    """Random probabilities, and every float32 within a few steps of `thresh` and of each
    rounding boundary around it (where a plain round would land on the wrong side)."""
    rng = np.random.default_rng(7)
    level = byte_map_level(thresh)
    centres = [
        np.float32(thresh),
        *(np.float32((level + k) / BYTE_MAP_SCALE) for k in (-1, 0.5, 1)),
    ]
    near = [
        np.nextafter(c, np.float32(d), dtype=np.float32) if d else c
        for c in centres
        for d in (-1, 0, 1)
    ]
    steps = [np.float32(c) + np.float32(i * 1e-4) for c in centres for i in range(-30, 31)]
    values = np.concatenate(
        [rng.random(4000, dtype=np.float32), np.array(near + steps, np.float32), [0, 1]]
    )
    return np.clip(values, 0, 1).astype(np.float32)


@pytest.mark.parametrize("thresh", [0.3, 0.2, 0.5, 0.1234, 0.0, 1.0])
def test_the_bitmap_is_exact_and_values_within_one_step(thresh: float) -> None:
    prob = _probabilities(thresh)
    byte = quantize_map(prob, thresh)
    assert byte.dtype == np.uint8
    assert np.array_equal(byte > byte_map_level(thresh), prob > np.float32(thresh))
    assert float(np.abs(byte / np.float32(BYTE_MAP_SCALE) - prob).max()) < 1 / BYTE_MAP_SCALE


def test_plain_rounding_would_move_pixels_across_the_threshold() -> None:
    """The control: without the push to each side, some pixels next to 0.3 change sides."""
    prob = _probabilities(0.3)
    rounded = np.round(prob * np.float32(BYTE_MAP_SCALE))
    assert (rounded > byte_map_level(0.3)).sum() != (prob > np.float32(0.3)).sum()


def _map_with_text(seed: int) -> np.ndarray:
    """An (H, W) float32 map like a detector's: soft blobs of lines, with scores close to the
    box threshold, on a noisy background."""
    rng = np.random.default_rng(seed)
    prob = rng.random((160, 320), dtype=np.float32) * 0.2
    for row in range(6):
        y = 12 + row * 25
        x0 = int(rng.integers(5, 60))
        x1 = int(rng.integers(150, 310))
        level = np.float32(rng.uniform(0.55, 0.95))
        cv2.rectangle(prob, (x0, y), (x1, y + 10), (float(level),), -1)
    return np.clip(cv2.GaussianBlur(prob, (5, 5), 1.5), 0, 1).astype(np.float32)


@pytest.mark.parametrize("seed", range(4))
def test_postprocess_reads_a_byte_map_as_the_float_map(seed: int) -> None:
    prob = _map_with_text(seed)
    params = DetParams()
    byte = quantize_map(prob, params.thresh)
    theirs = det_postprocess.postprocess_det(prob, (320, 640), params)
    ours = det_postprocess.postprocess_det(byte, (320, 640), params)
    assert len(theirs) >= 2
    assert np.array_equal(ours, theirs)


def test_box_scores_of_a_byte_map_are_within_one_step() -> None:
    prob = _map_with_text(0)
    byte = quantize_map(prob, 0.3)
    bitmap = (prob > np.float32(0.3)).astype(np.uint8) * 255
    contours, _ = cv2.findContours(bitmap, cv2.RETR_LIST, cv2.CHAIN_APPROX_SIMPLE)
    assert contours
    for contour in contours:
        points, _ = det_postprocess._get_mini_boxes(contour)
        exact = det_postprocess._box_score_fast(prob, points)
        read = det_postprocess._box_score_fast(byte, points) / BYTE_MAP_SCALE
        assert abs(exact - read) < 1 / BYTE_MAP_SCALE


def test_the_det_stage_reads_byte_maps_as_they_are() -> None:
    raw = quantize_map(_map_with_text(1), 0.3)[None, None]
    stage = DET.reading_byte_map()
    out = stage.output(raw)
    assert out.dtype == np.uint8
    assert out.shape == (1, *raw.shape[2:])
    assert np.shares_memory(out, raw)  # no copy on the worker's thread
    with pytest.raises(ValueError, match="uint8"):
        stage.output(raw.astype(np.float32))
    with pytest.raises(ValueError, match="byte map"):
        stage.reading_byte_map()
