"""Line geometry between detection and recognition: reading order, line crops and bounding boxes."""

from __future__ import annotations

from collections.abc import Sequence

import cv2
import numpy as np

_SAME_LINE_DY_PX = 10
_TALL_CROP_RATIO = 1.5
CROP_PIXELS_PER_PAGE_PX = 4
"""The line crops of one page may hold this many pixels per page pixel, all together (all of
them are held at once): 12 bytes a page pixel, of the 15 the server charges a page for its crops
and recognition chunks (`serving.scheduling.page_memory`). A page's lines cover it about once
(PaddleOCR's 1.5 unclip ratio: under twice); overlapping boxes grown with a large unclip ratio
over dense small blobs (`det_box_thresh=0`) covered it many times over (issue 49, item 6)."""


class CropsTooLarge(ValueError):
    """The page's crops would hold more than `CROP_PIXELS_PER_PAGE_PX` times its pixels."""

    def __init__(self, boxes: int, crop_pixels: int, page_pixels: int) -> None:
        super().__init__(
            f"the page's {boxes} text boxes would crop {crop_pixels} pixels, more than "
            f"{CROP_PIXELS_PER_PAGE_PX} times its {page_pixels}"
        )
        self.boxes = boxes
        self.crop_pixels = crop_pixels
        self.page_pixels = page_pixels


def sort_quad_boxes(polys: np.ndarray | Sequence[np.ndarray]) -> np.ndarray:
    """Sorts quads into reading order exactly as PaddleX's SortQuadBoxes does.

    Quads are sorted by (y, x) of their first point; then each quad moves left past its
    predecessors while their first points are less than 10 px apart vertically and it lies left
    of them.

    Args:
        polys: Quads of shape (N, 4, 2), points TL, TR, BR, BL.

    Returns:
        The quads in reading order, shape (N, 4, 2), same dtype as the input.
    """
    boxes = np.asarray(polys)
    if len(boxes) == 0:
        return boxes.reshape(0, 4, 2)
    order = sorted(range(len(boxes)), key=lambda i: (boxes[i][0][1], boxes[i][0][0]))
    tops = [(int(boxes[i][0][0]), int(boxes[i][0][1])) for i in order]
    for i in range(len(order) - 1):
        for j in range(i, -1, -1):
            (x_next, y_next), (x_cur, y_cur) = tops[j + 1], tops[j]
            if abs(y_next - y_cur) < _SAME_LINE_DY_PX and x_next < x_cur:
                tops[j], tops[j + 1] = tops[j + 1], tops[j]
                order[j], order[j + 1] = order[j + 1], order[j]
            else:
                break
    return boxes[order]


def crop_text_lines(
    image: np.ndarray, polys: np.ndarray | Sequence[np.ndarray], *, bounded: bool = False
) -> tuple[list[np.ndarray], np.ndarray]:
    """Cuts one upright crop per quad as PaddleX's CropByPolys (quad mode) and OCR pipeline do.

    Each crop is the perspective-warped minimum-area rectangle of the quad (bicubic, replicated
    border), turned 90 degrees counter-clockwise when it is at least 1.5 times taller than wide.
    Empty crops are dropped along with their quads.

    Args:
        image: The BGR page the quads were detected on.
        polys: Quads of shape (N, 4, 2), usually in reading order.

        bounded: Refuse crops that would hold more than `CROP_PIXELS_PER_PAGE_PX` times the
            page's pixels, measured before any is cut.

    Returns:
        The crops, and the quads that produced them (shape (M, 4, 2), input order and dtype).

    Raises:
        CropsTooLarge: `bounded`, and the crops would be too large.
    """
    boxes = np.asarray(polys)
    rects = [_minarea_rect(poly) for poly in boxes]
    if bounded:
        page_px = int(image.shape[0]) * int(image.shape[1])
        crop_px = sum(_crop_pixels(rect, image) for rect in rects)
        if crop_px > CROP_PIXELS_PER_PAGE_PX * page_px:
            raise CropsTooLarge(len(rects), crop_px, page_px)
    crops: list[np.ndarray] = []
    kept: list[int] = []
    for i, rect in enumerate(rects):
        crop = _rotate_crop(image, rect)
        if crop.size > 0 and crop.shape[0] > 0 and crop.shape[1] > 0:
            crops.append(crop)
            kept.append(i)
    return crops, boxes[kept].reshape(len(kept), 4, 2)


def boxes_from_polys(polys: np.ndarray | Sequence[np.ndarray]) -> np.ndarray:
    """Converts quads to axis-aligned boxes as PaddleX's convert_points_to_boxes does.

    Args:
        polys: Quads of shape (N, 4, 2).

    Returns:
        int16 array of shape (N, 4): xmin, ymin, xmax, ymax; shape (0, 4) when there are none.
    """
    boxes = np.asarray(polys)
    if len(boxes) == 0:
        return np.zeros((0, 4), np.int16)
    xs, ys = boxes[:, :, 0], boxes[:, :, 1]
    out = np.stack([xs.min(axis=1), ys.min(axis=1), xs.max(axis=1), ys.max(axis=1)], axis=1)
    return out.astype(np.int16)


def _minarea_rect(poly: np.ndarray) -> np.ndarray:
    # Mirrors CropByPolys.get_minarea_rect_crop (PaddleX 3.7.2), up to the crop.
    bounding_box = cv2.minAreaRect(np.array(poly).astype(np.int32))
    points = sorted(cv2.boxPoints(bounding_box), key=lambda p: p[0])
    index_a, index_d = (0, 1) if points[1][1] > points[0][1] else (1, 0)
    index_b, index_c = (2, 3) if points[3][1] > points[2][1] else (3, 2)
    return np.array([points[index_a], points[index_b], points[index_c], points[index_d]])


def _crop_size(points: np.ndarray) -> tuple[int, int]:
    crop_w = int(max(np.linalg.norm(points[0] - points[1]), np.linalg.norm(points[2] - points[3])))
    crop_h = int(max(np.linalg.norm(points[0] - points[3]), np.linalg.norm(points[1] - points[2])))
    return crop_w, crop_h


def _crop_pixels(points: np.ndarray, image: np.ndarray) -> int:
    """Pixels `_rotate_crop` makes of `points`: a zero-sized side makes it the whole page."""
    crop_w, crop_h = _crop_size(points)
    if crop_w == 0 or crop_h == 0:
        return int(image.shape[0]) * int(image.shape[1])
    return crop_w * crop_h


def _rotate_crop(image: np.ndarray, points: np.ndarray) -> np.ndarray:
    # Mirrors CropByPolys.get_rotate_crop_image. A zero-sized side makes OpenCV fall back to the
    # source size, so degenerate quads yield a whole-page crop, as in PaddleX.
    crop_w, crop_h = _crop_size(points)
    pts_std = np.array([[0, 0], [crop_w, 0], [crop_w, crop_h], [0, crop_h]], dtype=np.float32)
    matrix = cv2.getPerspectiveTransform(points, pts_std)
    dst: np.ndarray = cv2.warpPerspective(
        image,
        matrix,
        (crop_w, crop_h),
        borderMode=cv2.BORDER_REPLICATE,
        flags=cv2.INTER_CUBIC,
    )
    if dst.shape[0] * 1.0 / dst.shape[1] >= _TALL_CROP_RATIO:
        dst = np.rot90(dst)
    return dst
