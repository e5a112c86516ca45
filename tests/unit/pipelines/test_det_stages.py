"""Unit tests for detection pre- and postprocessing on synthetic images and probability maps."""

from __future__ import annotations

import numpy as np
import pytest

from pipelines.det_postprocess import postprocess_det
from pipelines.det_preprocess import preprocess_det
from pipelines.types import DetInput, DetParams

pytestmark = pytest.mark.unit

MEAN = np.array([0.485, 0.456, 0.406])
STD = np.array([0.229, 0.224, 0.225])


def _solid(h: int, w: int, bgr: tuple[int, int, int]) -> np.ndarray:
    image = np.empty((h, w, 3), np.uint8)
    image[:] = bgr
    return image


# ---------------------------------------------------------------- preprocess_det


def test_no_resize_when_already_multiple_of_32_and_channels_stay_bgr() -> None:
    det_input = preprocess_det(_solid(64, 96, (0, 128, 255)), DetParams())
    assert det_input.tensor.shape == (3, 64, 96)
    assert det_input.tensor.dtype == np.float32
    assert (det_input.src_h, det_input.src_w) == (64, 96)
    assert (det_input.ratio_h, det_input.ratio_w) == (1.0, 1.0)
    expected = (np.array([0, 128, 255]) / 255 - MEAN) / STD  # mean/std applied to B, G, R as is
    for c in range(3):
        assert np.allclose(det_input.tensor[c], expected[c], atol=1e-5)


def test_min_limit_only_rounds_sides_to_multiples_of_32() -> None:
    det_input = preprocess_det(_solid(100, 211, (9, 9, 9)), DetParams())
    assert det_input.tensor.shape == (3, 96, 224)  # round(100/32)=3, round(211/32)=7
    assert det_input.ratio_h == 96 / 100
    assert det_input.ratio_w == 224 / 211


def test_min_limit_upscales_short_side() -> None:
    det_input = preprocess_det(_solid(40, 100, (9, 9, 9)), DetParams(limit_side_len=64))
    # ratio 64/40 = 1.6 -> 64 x 160
    assert det_input.tensor.shape == (3, 64, 160)
    assert (det_input.ratio_h, det_input.ratio_w) == (64 / 40, 160 / 100)


def test_max_limit_downscales_long_side() -> None:
    params = DetParams(limit_side_len=320, limit_type="max")
    assert preprocess_det(_solid(1000, 500, (1, 2, 3)), params).tensor.shape == (3, 320, 160)
    assert preprocess_det(_solid(100, 200, (1, 2, 3)), params).tensor.shape == (3, 96, 192)


def test_resize_long_scales_up_and_down() -> None:
    params = DetParams(limit_side_len=960, limit_type="resize_long")
    assert preprocess_det(_solid(100, 300, (1, 2, 3)), params).tensor.shape == (3, 320, 960)
    assert preprocess_det(_solid(3000, 1000, (1, 2, 3)), params).tensor.shape == (3, 960, 320)


def test_max_side_limit_caps_the_long_side() -> None:
    det_input = preprocess_det(_solid(50, 4100, (1, 2, 3)), DetParams())
    assert det_input.tensor.shape == (3, 64, 4000)
    small_cap = preprocess_det(_solid(50, 4100, (1, 2, 3)), DetParams(max_side_limit=1000))
    assert small_cap.tensor.shape[2] == 992


def test_tiny_image_is_zero_padded_before_resizing() -> None:
    det_input = preprocess_det(_solid(10, 20, (255, 255, 255)), DetParams())
    # padded to 32 x 32, then scaled by 64/32
    assert det_input.tensor.shape == (3, 64, 64)
    assert (det_input.src_h, det_input.src_w) == (10, 20)
    assert (det_input.ratio_h, det_input.ratio_w) == (2.0, 2.0)
    white = (1.0 - MEAN[0]) / STD[0]
    black = -MEAN[0] / STD[0]
    assert det_input.tensor[0, 2, 2] == pytest.approx(white, abs=1e-5)
    assert det_input.tensor[0, 60, 60] == pytest.approx(black, abs=1e-5)
    assert det_input.tensor[0, 2, 60] == pytest.approx(black, abs=1e-5)


@pytest.mark.parametrize("shape", [(20, 30), (20, 30, 4), (0, 30, 3)])
def test_rejects_non_bgr_images(shape: tuple[int, ...]) -> None:
    with pytest.raises(ValueError, match="BGR"):
        preprocess_det(np.zeros(shape, np.uint8), DetParams())


def test_rejects_unknown_limit_type() -> None:
    with pytest.raises(ValueError, match="limit_type"):
        preprocess_det(_solid(64, 64, (0, 0, 0)), DetParams(limit_type="middle"))


# ---------------------------------------------------------------- postprocess_det


def _map_with_rects(
    rects: list[tuple[int, int, int, int, float]], shape: tuple[int, int] = (160, 320)
) -> np.ndarray:
    prob = np.zeros(shape, np.float32)
    for y0, y1, x0, x1, value in rects:
        prob[y0 : y1 + 1, x0 : x1 + 1] = value
    return prob


def _sorted_by_x(quads: np.ndarray) -> np.ndarray:
    return quads[np.argsort(quads[:, 0, 0])]


def test_two_rectangles_give_two_unclipped_quads_in_source_pixels() -> None:
    prob = _map_with_rects([(20, 40, 30, 150, 0.9), (80, 110, 200, 300, 0.95)])
    quads = _sorted_by_x(postprocess_det(prob, (320, 640), DetParams()))
    assert quads.dtype == np.int16
    assert quads.shape == (2, 4, 2)
    # Rectangle (30..150) x (20..40): unclip distance = 2400 * 1.5 / 280 = 12.86 map pixels,
    # then everything doubles to source pixels.
    expected_a = np.array([[34, 14], [326, 14], [326, 106], [34, 106]])
    assert np.abs(quads[0].astype(int) - expected_a).max() <= 2
    # TL, TR, BR, BL
    tl, tr, br, bl = quads[1].astype(int)
    assert tl[0] < tr[0]
    assert bl[0] < br[0]
    assert tl[1] < bl[1]
    assert tr[1] < br[1]


def test_low_scoring_box_is_dropped_by_box_thresh() -> None:
    prob = _map_with_rects([(20, 40, 30, 150, 0.5), (80, 110, 200, 300, 0.9)])
    kept = postprocess_det(prob, (160, 320), DetParams())
    assert len(kept) == 1
    assert kept[0, 0, 0] > 150
    assert len(postprocess_det(prob, (160, 320), DetParams(box_thresh=0.45))) == 2


def test_thresh_binarises_the_map() -> None:
    prob = _map_with_rects([(20, 40, 30, 150, 0.7)])
    assert len(postprocess_det(prob, (160, 320), DetParams(thresh=0.3))) == 1
    assert len(postprocess_det(prob, (160, 320), DetParams(thresh=0.7))) == 0


def test_larger_unclip_ratio_gives_larger_quads() -> None:
    prob = _map_with_rects([(20, 40, 30, 150, 0.9)])
    small = postprocess_det(prob, (160, 320), DetParams(unclip_ratio=1.0))[0].astype(int)
    large = postprocess_det(prob, (160, 320), DetParams(unclip_ratio=2.5))[0].astype(int)
    assert large[2, 0] - large[0, 0] > small[2, 0] - small[0, 0] + 10
    assert large[2, 1] - large[0, 1] > small[2, 1] - small[0, 1] + 10


def test_boxes_thinner_than_min_size_are_dropped() -> None:
    prob = _map_with_rects([(20, 21, 30, 150, 0.9), (80, 110, 200, 300, 0.9)])
    assert len(postprocess_det(prob, (160, 320), DetParams())) == 1


def test_boxes_still_thin_after_unclipping_are_dropped() -> None:
    prob = _map_with_rects([(20, 23, 30, 150, 0.9)])  # 3 px between contour rows: passes min_size
    assert len(postprocess_det(prob, (160, 320), DetParams())) == 1
    # Barely unclipped, its short side stays below min_size + 2 = 5.
    assert len(postprocess_det(prob, (160, 320), DetParams(unclip_ratio=0.05))) == 0


def test_max_candidates_caps_the_contours_considered() -> None:
    rects = [(10 + 30 * i, 25 + 30 * i, 20, 200, 0.9) for i in range(5)]
    prob = _map_with_rects(rects)
    assert len(postprocess_det(prob, (160, 320), DetParams())) == 5
    assert len(postprocess_det(prob, (160, 320), DetParams(max_candidates=2))) == 2


def test_quads_are_clipped_to_the_source_image() -> None:
    prob = _map_with_rects([(0, 30, 0, 319, 0.9)])
    quads = postprocess_det(prob, (80, 160), DetParams())
    assert quads.shape == (1, 4, 2)
    assert quads[..., 0].min() == 0
    assert quads[..., 0].max() == 160
    assert quads[..., 1].min() == 0


def test_accepts_det_input_like_a_source_size() -> None:
    prob = _map_with_rects([(20, 40, 30, 150, 0.9)])
    det_input = DetInput(
        pixels=np.zeros((3, 160, 320), np.uint8), src_h=100, src_w=250, ratio_h=1.6, ratio_w=1.28
    )
    by_input = postprocess_det(prob, det_input, DetParams())
    assert np.array_equal(by_input, postprocess_det(prob, (100, 250), DetParams()))
    assert by_input[..., 0].max() <= 250


def test_empty_map_gives_an_empty_int16_array() -> None:
    quads = postprocess_det(np.zeros((64, 64), np.float32), (64, 64), DetParams())
    assert quads.shape == (0, 4, 2)
    assert quads.dtype == np.int16


def test_rejects_a_batched_map() -> None:
    with pytest.raises(ValueError, match="probability map"):
        postprocess_det(np.zeros((1, 1, 64, 64), np.float32), (64, 64), DetParams())


def _dense_blobs(side: int = 400, blob: int = 10, pitch: int = 12) -> np.ndarray:
    prob = np.zeros((side, side), dtype=np.float32)
    for y in range(0, side - blob, pitch):
        for x in range(0, side - blob, pitch):
            prob[y : y + blob, x : x + blob] = 0.9
    return prob


def test_crops_past_four_times_the_page_are_refused_before_any_is_cut() -> None:
    """Issue 49: boxes grown with a large unclip ratio over dense small blobs
    (`det_box_thresh=0`) cropped many times the page, all held at once."""
    from pipelines.crop import CROP_PIXELS_PER_PAGE_PX, CropsTooLarge, crop_text_lines

    prob = _dense_blobs()
    page = np.zeros((400, 400, 3), dtype=np.uint8)
    usual = postprocess_det(prob, (400, 400), DetParams(unclip_ratio=1.5, box_thresh=0.0))
    crops, _ = crop_text_lines(page, usual, bounded=True)
    assert sum(c.shape[0] * c.shape[1] for c in crops) < 2 * 400 * 400
    grown = postprocess_det(prob, (400, 400), DetParams(unclip_ratio=4.0, box_thresh=0.0))
    with pytest.raises(CropsTooLarge) as refused:
        crop_text_lines(page, grown, bounded=True)
    assert refused.value.crop_pixels > CROP_PIXELS_PER_PAGE_PX * 400 * 400
    assert len(crop_text_lines(page, grown)[0]) == len(grown)  # unbounded: as PaddleX crops
