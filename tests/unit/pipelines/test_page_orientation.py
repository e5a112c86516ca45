"""Page orientation: the classifier's input and answer, turning pages, and boxes brought back into
the page as sent (`pipelines.page_orientation`, `pipelines.page.after_ori` and `finish`)."""

from __future__ import annotations

import numpy as np
import pytest

from pipelines.page import after_ori, prepare_orientation, to_sent_page, to_upright_page
from pipelines.page_orientation import (
    ANGLES,
    OriParams,
    PageOrientation,
    classify_page,
    resize_ori,
    sent_size,
    to_sent_box,
    to_sent_points,
    turn_upright,
)
from pipelines.types import DetParams, PageResult, TextLine, Word

WIDTH, HEIGHT = 7, 4


def _sent_page() -> np.ndarray:
    """A page whose every pixel says where it is: (x, y, 0)."""
    ys, xs = np.mgrid[0:HEIGHT, 0:WIDTH]
    return np.stack([xs, ys, np.zeros_like(xs)], axis=-1).astype(np.uint8)


def _probs(angle: int, score: float = 0.92) -> np.ndarray:
    row = np.full((1, 4), (1 - score) / 3, np.float32)
    row[0, ANGLES.index(angle)] = score
    return row


@pytest.mark.parametrize("angle", ANGLES)
def test_pixels_of_the_upright_page_map_back_to_the_sent_pixels(angle: int) -> None:
    sent = _sent_page()
    upright = turn_upright(sent, angle)
    height, width = upright.shape[:2]
    assert sent_size(angle, width, height) == (WIDTH, HEIGHT)
    for y in range(height):
        for x in range(width):
            # The pixel whose top-left corner is (x, y) upright covers the unit square whose
            # corners map back to the sent pixel's square: its smallest corner is that pixel.
            square = np.array([[x, y], [x + 1, y], [x + 1, y + 1], [x, y + 1]])
            back = to_sent_points(square, angle, width, height)
            sx, sy = back[:, 0].min(), back[:, 1].min()
            assert back[:, 0].max() - sx == 1
            assert back[:, 1].max() - sy == 1
            assert tuple(upright[y, x, :2]) == (sx, sy)


@pytest.mark.parametrize(
    ("angle", "expected"),
    [
        (0, (1, 2, 4, 3)),
        # The upright page is 4 wide and 7 high (turn_upright by 90 is counter-clockwise):
        # upright (x, y) is sent (7 - y, x).
        (90, (4, 1, 5, 4)),
        (180, (3, 1, 6, 2)),
        (270, (2, 0, 3, 3)),
    ],
)
def test_boxes_map_back(angle: int, expected: tuple[int, int, int, int]) -> None:
    width, height = (WIDTH, HEIGHT) if angle in (0, 180) else (HEIGHT, WIDTH)
    assert to_sent_box((1, 2, 4, 3), angle, width, height) == expected


def test_classify_page_turns_only_a_sure_turned_page() -> None:
    params = OriParams()
    sure = classify_page(_probs(90), params)
    assert (sure.angle, sure.turned, sure.applied) == (90, True, 90)
    assert sure.score == pytest.approx(0.92)
    assert not classify_page(_probs(0), params).turned
    unsure = classify_page(_probs(180, score=0.4), params)
    assert (unsure.angle, unsure.turned, unsure.applied) == (180, False, 0)
    with pytest.raises(ValueError, match="class scores"):
        classify_page(np.zeros((1, 2), np.float32), params)


def test_resize_ori_centre_crops_the_short_side_resized_page() -> None:
    page = np.full((600, 300, 3), 255, np.uint8)
    page[:, :, 0] = 0  # blue channel off: BGR stays BGR
    pixels = resize_ori(page, OriParams())
    assert pixels.shape == (3, 224, 224)
    assert pixels.dtype == np.uint8
    assert pixels[0].max() == 0
    assert pixels[2].min() == 255
    with pytest.raises(ValueError, match="BGR page"):
        resize_ori(np.zeros((4, 4), np.uint8), OriParams())


@pytest.mark.parametrize("angle", ANGLES)
def test_after_ori_reads_the_page_upright_and_finish_maps_back(angle: int) -> None:
    page = np.zeros((64, 96, 3), np.uint8)
    step = prepare_orientation(page, OriParams())
    assert step.state.awaiting == "ori"
    assert step.pixels[0].data.shape == (1, 3, 224, 224)
    upright, det_step = after_ori(step.state, page, [_probs(angle)], DetParams(), OriParams())
    assert det_step.state.awaiting == "det"
    assert det_step.state.orientation is not None
    assert det_step.state.orientation.angle == angle
    assert (upright is page) == (angle == 0)
    assert upright.shape[:2] == ((64, 96) if angle in (0, 180) else (96, 64))
    height, width = upright.shape[:2]
    poly = np.array([[2, 3], [20, 3], [20, 9], [2, 9]], np.int16)
    word = Word(text="a", box=(2, 3, 20, 9), score=1.0)
    line = TextLine(text="a", score=1.0, poly=poly, words=(word,))
    read = PageResult(width=width, height=height, dt_polys=[poly], lines=[line])
    sent = to_sent_page(read, det_step.state.orientation)
    assert (sent.width, sent.height) == (96, 64)
    assert sent.page_orientation == det_step.state.orientation
    expected = to_sent_points(poly, angle, width, height)
    np.testing.assert_array_equal(sent.lines[0].poly, expected)
    np.testing.assert_array_equal(sent.dt_polys[0], expected)
    xs, ys = expected[:, 0], expected[:, 1]
    assert sent.lines[0].words[0].box == (xs.min(), ys.min(), xs.max(), ys.max())


def test_an_unsure_page_is_read_as_sent() -> None:
    page = np.zeros((64, 96, 3), np.uint8)
    step = prepare_orientation(page, OriParams())
    upright, det_step = after_ori(step.state, page, [_probs(270, 0.3)], DetParams(), OriParams())
    assert upright is page
    found = det_step.state.orientation
    assert found is not None
    assert (found.angle, found.turned) == (270, False)


@pytest.mark.parametrize("angle", ANGLES)
def test_to_upright_page_undoes_to_sent_page(angle: int) -> None:
    poly = np.array([[2, 3], [20, 3], [20, 9], [2, 9]], np.int16)
    word = Word(text="a", box=(2, 3, 20, 9), score=1.0)
    line = TextLine(text="a", score=1.0, poly=poly, words=(word,))
    width, height = (96, 64) if angle in (0, 180) else (64, 96)
    read = PageResult(width=width, height=height, dt_polys=[poly], lines=[line])
    found = PageOrientation(angle=angle, score=0.9, turned=angle != 0)
    upright = to_upright_page(to_sent_page(read, found))
    assert (upright.width, upright.height) == (width, height)
    np.testing.assert_array_equal(upright.lines[0].poly, poly)
    assert upright.lines[0].words[0].box == word.box
    assert upright.page_orientation == found
