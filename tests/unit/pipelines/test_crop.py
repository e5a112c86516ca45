"""Unit tests for quad sorting, line crops and bounding boxes."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from pipelines.crop import boxes_from_polys, crop_text_lines, sort_quad_boxes

pytestmark = pytest.mark.unit


def _quad(x0: int, y0: int, x1: int, y1: int) -> np.ndarray:
    return np.array([[x0, y0], [x1, y0], [x1, y1], [x0, y1]], np.int16)


def _gradient_image(h: int = 120, w: int = 200) -> np.ndarray:
    yy, xx = np.mgrid[0:h, 0:w]
    return np.stack([xx % 256, yy % 256, (xx + 3 * yy) % 256], axis=2).astype(np.uint8)


# ---------------------------------------------------------------- sort_quad_boxes


def test_sort_orders_lines_top_down_and_boxes_left_to_right() -> None:
    a = _quad(300, 10, 350, 30)
    b = _quad(100, 14, 150, 34)  # same line as a (4 px lower), further left
    c = _quad(50, 40, 90, 60)  # next line
    d = _quad(500, 12, 550, 32)
    out = sort_quad_boxes(np.stack([a, c, d, b]))
    assert out.dtype == np.int16
    assert [int(q[0, 0]) for q in out] == [100, 300, 500, 50]


def test_sort_keeps_vertical_order_beyond_10_px() -> None:
    upper = _quad(300, 10, 350, 30)
    lower = _quad(100, 20, 150, 40)  # 10 px lower: a new line even though further left
    out = sort_quad_boxes([lower, upper])
    assert [int(q[0, 1]) for q in out] == [10, 20]


def test_sort_of_nothing_is_empty() -> None:
    assert sort_quad_boxes(np.zeros((0, 4, 2), np.int16)).shape == (0, 4, 2)
    assert sort_quad_boxes([]).shape == (0, 4, 2)


# ---------------------------------------------------------------- crop_text_lines


def test_axis_aligned_quad_crops_the_exact_pixels() -> None:
    image = _gradient_image()
    crops, kept = crop_text_lines(image, [_quad(10, 20, 60, 40)])
    assert len(crops) == 1
    assert crops[0].shape == (20, 50, 3)
    assert np.array_equal(crops[0], image[20:40, 10:60])
    assert np.array_equal(kept, _quad(10, 20, 60, 40)[None])


def test_tall_crop_is_turned_counter_clockwise() -> None:
    image = _gradient_image()
    crops, _ = crop_text_lines(image, [_quad(100, 10, 120, 100)])  # 20 wide, 90 tall
    assert crops[0].shape == (20, 90, 3)
    assert np.array_equal(crops[0], np.rot90(image[10:100, 100:120]))


def test_not_quite_tall_crop_is_left_upright() -> None:
    crops, _ = crop_text_lines(_gradient_image(), [_quad(100, 10, 140, 69)])  # h/w = 1.475
    assert crops[0].shape == (59, 40, 3)


def test_rotated_quad_is_straightened() -> None:
    image = np.zeros((200, 300, 3), np.uint8)
    rect = ((150.0, 100.0), (160.0, 30.0), 20.0)
    corners = cv2.boxPoints(rect)
    cv2.fillPoly(image, [np.round(corners).astype(np.int32)], (255, 255, 255))
    quad = np.round(corners).astype(np.int16)
    crops, _ = crop_text_lines(image, [quad])
    h, w = crops[0].shape[:2]
    assert abs(w - 160) <= 2
    assert abs(h - 30) <= 2
    assert crops[0][2:-2, 2:-2].min() == 255  # inside is all text, no black background


def test_crops_follow_the_quad_order() -> None:
    image = _gradient_image()
    quads = np.stack([_quad(50, 50, 90, 70), _quad(10, 5, 30, 15)])
    crops, kept = crop_text_lines(image, quads)
    assert [c.shape for c in crops] == [(20, 40, 3), (10, 20, 3)]
    assert np.array_equal(kept, quads)


def test_degenerate_quad_yields_a_page_sized_crop_as_in_paddlex() -> None:
    # OpenCV treats a zero-sized dsize as "same as source", so nothing is ever empty.
    image = _gradient_image()
    crops, kept = crop_text_lines(image, [np.array([[10, 10], [50, 10], [50, 10], [10, 10]])])
    assert crops[0].shape == image.shape
    assert len(kept) == 1


def test_no_quads_no_crops() -> None:
    crops, kept = crop_text_lines(_gradient_image(), np.zeros((0, 4, 2), np.int16))
    assert crops == []
    assert kept.shape == (0, 4, 2)


# ---------------------------------------------------------------- boxes_from_polys


def test_boxes_are_min_max_of_each_quad() -> None:
    quads = np.array(
        [[[10, 20], [60, 18], [62, 40], [9, 43]], [[5, 5], [6, 5], [6, 7], [5, 7]]], np.int16
    )
    boxes = boxes_from_polys(quads)
    assert boxes.dtype == np.int16
    assert boxes.tolist() == [[9, 18, 62, 43], [5, 5, 6, 7]]


def test_boxes_of_nothing_have_shape_0_4() -> None:
    boxes = boxes_from_polys([])
    assert boxes.shape == (0, 4)
    assert boxes.dtype == np.int16
