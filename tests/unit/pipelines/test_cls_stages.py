"""Unit tests for textline-orientation pre- and postprocessing."""

from __future__ import annotations

import math

import cv2
import numpy as np
import pytest

from pipelines.cls_postprocess import apply_orientation, classify_orientation
from pipelines.cls_preprocess import plan_cls_batches, preprocess_cls
from pipelines.page import gather_orientations
from pipelines.types import ClsParams

pytestmark = pytest.mark.unit


def _crop(h: int, w: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


def test_preprocess_resizes_to_160x80_and_converts_bgr_to_rgb() -> None:
    blue = np.zeros((30, 300, 3), np.uint8)
    blue[:, :, 0] = 255  # BGR blue
    out = preprocess_cls(blue, ClsParams())
    assert out.shape == (3, 80, 160)
    assert out.dtype == np.float32
    # After BGR -> RGB, channel 0 is red (0) and channel 2 is blue (255).
    assert np.allclose(out[0], (0.0 - 0.485) / 0.229, atol=1e-5)
    assert np.allclose(out[1], (0.0 - 0.456) / 0.224, atol=1e-5)
    assert np.allclose(out[2], (1.0 - 0.406) / 0.225, atol=1e-5)


def test_preprocess_keeps_pixels_when_size_already_matches() -> None:
    crop = _crop(80, 160)
    out = preprocess_cls(crop, ClsParams())
    expected_red = (crop[:, :, 2] / 255.0 - 0.485) / 0.229
    assert np.allclose(out[0], expected_red, atol=1e-5)


def test_preprocess_rejects_gray_crops() -> None:
    with pytest.raises(ValueError, match="BGR"):
        preprocess_cls(np.zeros((10, 10), np.uint8), ClsParams())


def test_batches_keep_crop_order_in_groups_of_batch_size() -> None:
    crops = [_crop(10 + i, 40 + 7 * i, seed=i) for i in range(13)]
    batches = plan_cls_batches(crops, ClsParams())
    assert [b[0] for b in batches] == [tuple(range(6)), tuple(range(6, 12)), (12,)]
    assert [b[1].data.shape for b in batches] == [(6, 3, 80, 160), (6, 3, 80, 160), (1, 3, 80, 160)]
    assert np.array_equal(batches[1][1].normalized("cls")[2], preprocess_cls(crops[8], ClsParams()))


def test_batch_size_and_input_size_come_from_params() -> None:
    params = ClsParams(image_height=48, image_width=192, batch_size=4)
    batches = plan_cls_batches([_crop(20, 50, seed=i) for i in range(5)], params)
    assert [b[1].data.shape for b in batches] == [(4, 3, 48, 192), (1, 3, 48, 192)]
    assert plan_cls_batches([], params) == []


def test_classify_orientation_takes_the_top_class() -> None:
    probs = np.array([[0.9, 0.1], [0.2, 0.8], [0.51, 0.49]], np.float32)
    assert classify_orientation(probs) == [0, 1, 0]


def test_classify_orientation_breaks_exact_ties_like_paddlex_topk() -> None:
    assert classify_orientation(np.array([[0.5, 0.5]], np.float32)) == [1]


def test_class_0_crops_are_returned_unchanged() -> None:
    crop = _crop(7, 11)
    (out,) = apply_orientation([crop], [0])
    assert out is crop


def test_class_1_crops_are_turned_like_paddlex_rotate_image() -> None:
    crop = _crop(7, 11)
    (out,) = apply_orientation([crop], [1])
    assert out.shape == crop.shape
    # warpAffine about (w/2, h/2) maps x to w - x: shifted one pixel from np.rot90(crop, 2),
    # with a black first row and column.
    assert np.array_equal(out[1:, 1:], np.rot90(crop, 2)[:-1, :-1])
    assert out[0].max() == 0
    assert out[:, 0].max() == 0


def test_apply_orientation_validates_its_inputs() -> None:
    with pytest.raises(ValueError, match="class ids"):
        apply_orientation([_crop(5, 5)], [2])
    with pytest.raises(ValueError, match="crops"):
        apply_orientation([_crop(5, 5)], [0, 1])


def test_gather_orientations_puts_ids_back_in_crop_order() -> None:
    crops = [_crop(10, 30, seed=i) for i in range(8)]
    batches = [indices for indices, _ in plan_cls_batches(crops, ClsParams(batch_size=3))]
    probs = [np.array([[0.1, 0.9]] * len(b), np.float32) for b in batches]
    probs[1] = np.array([[0.8, 0.2], [0.3, 0.7], [0.6, 0.4]], np.float32)
    assert gather_orientations(batches, probs, len(crops)) == [1, 1, 1, 0, 1, 0, 1, 1]


def test_gather_orientations_rejects_mismatched_outputs() -> None:
    batches = [indices for indices, _ in plan_cls_batches([_crop(10, 30)], ClsParams())]
    with pytest.raises(ValueError, match="rows"):
        gather_orientations(batches, [np.zeros((2, 2), np.float32)], 1)
    with pytest.raises(ValueError, match="outputs"):
        gather_orientations(batches, [], 1)


# PaddleOCR 2.x's classifier (ch_ppocr_mobile_v2.0_cls, packaged by rapidocr): ClsResizeImg.
V2 = ClsParams(image_height=48, image_width=192, keep_ratio=True, min_upside_down_score=0.9)


def _v2_reference(crop: np.ndarray) -> np.ndarray:
    """RapidOCR 3.10's `TextClassifier.resize_norm_img`, as its source reads."""
    height, width = 48, 192
    ratio = crop.shape[1] / float(crop.shape[0])
    resized_w = width if math.ceil(height * ratio) > width else math.ceil(height * ratio)
    resized = cv2.resize(crop, (resized_w, height), interpolation=cv2.INTER_LINEAR)
    resized = resized.astype("float32").transpose((2, 0, 1)) / 255
    resized -= 0.5
    resized /= 0.5
    padded = np.zeros((3, height, width), dtype=np.float32)
    padded[:, :, :resized_w] = resized
    return padded


@pytest.mark.parametrize(("h", "w"), [(20, 30), (32, 128), (14, 400), (48, 192)])
def test_v2_crops_are_prepared_as_rapidocr_prepares_them(h: int, w: int) -> None:
    crop = _crop(h, w, seed=h + w)
    np.testing.assert_array_equal(preprocess_cls(crop, V2), _v2_reference(crop))
    ((indices, pixels),) = plan_cls_batches([crop, _crop(10, 15)], V2)
    assert indices == (0, 1)
    np.testing.assert_array_equal(pixels.normalized("cls")[0], _v2_reference(crop))


def test_v2_turns_a_crop_only_when_sure() -> None:
    probs = np.array([[0.2, 0.8], [0.05, 0.95], [0.6, 0.4]], np.float32)
    assert classify_orientation(probs, 0.9) == [0, 1, 0]
    assert classify_orientation(probs) == [1, 1, 0]  # PaddleX's: the top class
