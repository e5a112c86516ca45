"""A page's skew, from its detected line boxes: the angle its lines of text make with the page's
horizontal, as a page laid crooked on a scanner makes (issue 48). No model: the detector's quads
are minimum-area rectangles, turned as their text is.

Each long line (at least `MIN_ASPECT` times as long as it is thick: a short one's angle is a pixel
or two of rounding) gives the angle of its long sides; the page's skew is the median of those
angles weighted by the lines' lengths, so a few stray lines (a figure's label, a stamp) do not
move it. Lines further than `MAX_DEG` from level (text set sideways, a rotated caption) take no
part: a page turned a quarter is the page classifier's (`pipelines.page_orientation`).

Degrees counter-clockwise, as PIL's and OpenCV's rotations count them: a page whose lines rise to
the right is turned counter-clockwise (positive skew), and turning it by `-skew` levels it. The
angle is the same in the page as sent and in the page as read upright (turns commute).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

MIN_ASPECT = 4.0
"""A line is long enough to give an angle at this many times its thickness."""
MAX_DEG = 20.0
"""Lines further from level than this are not askew text but turned text: left out."""
DECIMALS = 2


def line_angles(polys: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """Each quad's angle (degrees counter-clockwise, its top and bottom sides' mean direction)
    and its length along that direction, in pixels.

    Args:
        polys: Quads of shape (N, 4, 2), points TL, TR, BR, BL, y down.
    """
    quads = np.asarray(polys, dtype=np.float64).reshape(-1, 4, 2)
    if not len(quads):
        return np.zeros(0), np.zeros(0)
    # Both long sides, left to right: TL->TR and BL->BR; y down, so a rising side has dy < 0.
    sides = (quads[:, 1] - quads[:, 0]) + (quads[:, 2] - quads[:, 3])
    angles = np.degrees(np.arctan2(-sides[:, 1], sides[:, 0]))
    lengths = np.hypot(sides[:, 0], sides[:, 1]) / 2
    return angles, lengths


def level_boxes(polys: ArrayLike, skew_deg: float) -> np.ndarray:
    """The quads' axis-aligned boxes on the page turned level (by `-skew_deg` about its
    origin), (N, 4) x0, y0, x1, y1: what the reading order sorts (`pipelines.layout`). On the
    page as scanned, a long line 2.5 degrees askew has a box taller than the line pitch, whose
    top is above the next line's: sorted by those boxes, the lines of a paragraph interleaved.

    Args:
        polys: Quads (N, 4, 2), or any (N, K, 2) points, y down.
        skew_deg: The page's skew, degrees counter-clockwise (`estimate_skew`).
    """
    points = np.asarray(polys, dtype=np.float64).reshape(-1, 4, 2)
    if skew_deg:
        turn = np.radians(skew_deg)
        cos, sin = np.cos(turn), np.sin(turn)
        x, y = points[..., 0], points[..., 1]
        points = np.stack([x * cos - y * sin, x * sin + y * cos], axis=-1)
    return np.concatenate([points.min(axis=1), points.max(axis=1)], axis=1)


def _thickness(quads: np.ndarray) -> np.ndarray:
    """The quads' short sides' mean length (TL->BL and TR->BR)."""
    left = np.hypot(*(quads[:, 3] - quads[:, 0]).T)
    right = np.hypot(*(quads[:, 2] - quads[:, 1]).T)
    thickness: np.ndarray = (left + right) / 2
    return thickness


def estimate_skew(polys: ArrayLike) -> float:
    """The page's skew in degrees counter-clockwise (see the module's docstring); 0.0 when no
    line is long enough to tell.

    Args:
        polys: The page's detected quads (`dt_polys`), (N, 4, 2), TL, TR, BR, BL.
    """
    quads = np.asarray(polys, dtype=np.float64).reshape(-1, 4, 2)
    angles, lengths = line_angles(quads)
    if not len(angles):
        return 0.0
    keep = (lengths >= MIN_ASPECT * np.maximum(_thickness(quads), 1.0)) & (
        np.abs(angles) <= MAX_DEG
    )
    if not keep.any():
        return 0.0
    return round(_weighted_median(angles[keep], lengths[keep]), DECIMALS) + 0.0  # no -0.0


def _weighted_median(values: np.ndarray, weights: np.ndarray) -> float:
    """The value at half the total weight, values in order (the mean of the two around it when
    half falls between them)."""
    order = np.argsort(values, kind="stable")
    values, weights = values[order], weights[order]
    cumulative = np.cumsum(weights)
    half = cumulative[-1] / 2
    index = int(np.searchsorted(cumulative, half))
    if np.isclose(cumulative[index], half) and index + 1 < len(values):
        return float((values[index] + values[index + 1]) / 2)
    return float(values[index])
