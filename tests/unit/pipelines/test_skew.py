"""The page's skew from its detected quads (`pipelines.skew`), on quads of known angles (real
pages turned by known angles: tests/e2e/test_text_layers.py)."""

from __future__ import annotations

import numpy as np
import pytest

from pipelines.skew import estimate_skew, line_angles

pytestmark = pytest.mark.unit


def _quad(x: float, y: float, length: float, degrees: float, height: float = 20) -> np.ndarray:
    """A line's quad turned `degrees` counter-clockwise (y down), corners TL, TR, BR, BL."""
    turn = np.radians(degrees)
    along = np.array([np.cos(turn), -np.sin(turn)]) * length
    down = np.array([np.sin(turn), np.cos(turn)]) * height
    p0 = np.array([x, y])
    return np.array([p0, p0 + along, p0 + along + down, p0 + down])


def test_angles_are_counter_clockwise_with_their_lengths() -> None:
    angles, lengths = line_angles([_quad(0, 100, 500, 3.0), _quad(0, 200, 300, -1.5)])
    assert angles == pytest.approx([3.0, -1.5])
    assert lengths == pytest.approx([500, 300])
    empty_angles, empty_lengths = line_angles(np.zeros((0, 4, 2)))
    assert len(empty_angles) == len(empty_lengths) == 0


def test_skew_is_the_long_lines_weighted_median() -> None:
    lines = [_quad(10, 40 * i, 800, 2.5) for i in range(6)]
    lines += [_quad(10, 300, 200, -6.0), _quad(10, 400, 200, 8.0)]  # short strays, out-weighed
    lines.append(_quad(10, 500, 60, 15.0))  # too short for its thickness: not counted
    lines.append(_quad(100, 600, 900, 90.0))  # text set sideways: not skew
    assert estimate_skew(np.array(lines)) == pytest.approx(2.5, abs=0.01)


@pytest.mark.parametrize("degrees", [-5.0, -1.0, 0.0, 0.4, 4.0])
def test_skew_of_integer_quads_within_a_tenth_of_a_degree(degrees: float) -> None:
    lines = np.array([_quad(50, 60 + 45 * i, 700 - 20 * i, degrees) for i in range(10)])
    assert estimate_skew(np.rint(lines).astype(np.int16)) == pytest.approx(degrees, abs=0.1)


def test_no_long_line_is_no_skew() -> None:
    assert estimate_skew(np.zeros((0, 4, 2))) == 0.0
    assert estimate_skew([_quad(0, 0, 30, 5.0)]) == 0.0
    assert str(estimate_skew([_quad(0, 0, 500, -0.001)])) == "0.0"  # never -0.0
