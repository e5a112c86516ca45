"""Detection postprocessing: turn the DB probability map into quads in source-image pixels."""

from __future__ import annotations

import math

import cv2
import numpy as np
import pyclipper

from pipelines.det_byte_map import BYTE_MAP_SCALE, byte_map_level
from pipelines.types import DetInput, DetParams

_MIN_SIZE = 3


def postprocess_det(
    prob_map: np.ndarray, det_input: DetInput | tuple[int, int], params: DetParams
) -> np.ndarray:
    """Extracts text quads from a DB probability map as PaddleX's DBPostProcess (quad mode) does.

    Settings not in `params` are PaddleX's defaults: `score_mode="fast"`, no dilation, `min_size=3`.

    Args:
        prob_map: The (H, W) probability map (the model's `[0, 0]` output plane), float32 or
            float16, or a byte map (uint8, `pipelines.det_byte_map`): its bitmap is then the
            pixels above `byte_map_level(params.thresh)`, and box scores its mean over 254.
        det_input: The page's `DetInput`, or its source size as `(src_h, src_w)`.
        params: Thresholds, unclip ratio and candidate cap, used as given.

    Returns:
        int16 array of shape (N, 4, 2): points TL, TR, BR, BL in source-image pixels, in
        contour order.

    Raises:
        ValueError: If `prob_map` is not two-dimensional.
    """
    if prob_map.ndim != 2:
        raise ValueError(f"expected an (H, W) probability map, got shape {prob_map.shape}")
    if isinstance(det_input, DetInput):
        src_h, src_w = det_input.src_h, det_input.src_w
    else:
        src_h, src_w = det_input
    if prob_map.dtype == np.uint8:
        bitmap = prob_map > np.uint8(byte_map_level(params.thresh))
        scale = 1 / BYTE_MAP_SCALE
    else:
        # In float32 whatever the map's dtype (a float16 map: `pipelines.stages.DET`), as PaddleX.
        bitmap = prob_map > np.float32(params.thresh)
        scale = 1.0
    boxes = _boxes_from_bitmap(prob_map, bitmap, float(src_w), float(src_h), params, scale)
    if not boxes:
        return np.zeros((0, 4, 2), np.int16)
    return np.array(boxes, dtype=np.int16)


def _boxes_from_bitmap(
    pred: np.ndarray,
    bitmap: np.ndarray,
    dest_w: float,
    dest_h: float,
    params: DetParams,
    scale: float = 1.0,
) -> list[np.ndarray]:
    # Mirrors DBPostProcess.boxes_from_bitmap (PaddleX 3.7.2).
    height, width = bitmap.shape
    width_scale = dest_w / width
    height_scale = dest_h / height
    contours, _ = cv2.findContours(
        (bitmap * 255).astype(np.uint8), cv2.RETR_LIST, cv2.CHAIN_APPROX_SIMPLE
    )
    boxes: list[np.ndarray] = []
    for contour in contours[: params.max_candidates]:
        points, sside = _get_mini_boxes(contour)
        if sside < _MIN_SIZE:
            continue
        score = _box_score_fast(pred, points) * scale
        if params.box_thresh > score:
            continue
        expanded = _unclip(points, params.unclip_ratio).reshape(-1, 1, 2)
        box, sside = _get_mini_boxes(expanded)
        if sside < _MIN_SIZE + 2:
            continue
        # PaddleX multiplies float32 coordinates by float64 scales and rounds half to even.
        scaled = box.astype(np.float64)
        scaled[:, 0] = np.clip(np.round(scaled[:, 0] * width_scale), 0, dest_w)
        scaled[:, 1] = np.clip(np.round(scaled[:, 1] * height_scale), 0, dest_h)
        boxes.append(scaled.astype(np.float32).astype(np.int16))
    return boxes


def _get_mini_boxes(contour: np.ndarray) -> tuple[np.ndarray, float]:
    # Mirrors DBPostProcess.get_mini_boxes: minAreaRect corners ordered TL, TR, BR, BL.
    bounding_box = cv2.minAreaRect(contour)
    points = sorted(cv2.boxPoints(bounding_box), key=lambda p: p[0])
    index_1, index_4 = (0, 1) if points[1][1] > points[0][1] else (1, 0)
    index_2, index_3 = (2, 3) if points[3][1] > points[2][1] else (3, 2)
    box = np.array([points[index_1], points[index_2], points[index_3], points[index_4]])
    return box, float(min(bounding_box[1]))


def _box_score_fast(bitmap: np.ndarray, box_in: np.ndarray) -> float:
    # Mirrors DBPostProcess.box_score_fast: mean of the map inside the quad.
    h, w = bitmap.shape[:2]
    box = box_in.copy()
    xmin = max(0, min(math.floor(box[:, 0].min()), w - 1))
    xmax = max(0, min(math.ceil(box[:, 0].max()), w - 1))
    ymin = max(0, min(math.floor(box[:, 1].min()), h - 1))
    ymax = max(0, min(math.ceil(box[:, 1].max()), h - 1))
    mask = np.zeros((ymax - ymin + 1, xmax - xmin + 1), dtype=np.uint8)
    box[:, 0] = box[:, 0] - xmin
    box[:, 1] = box[:, 1] - ymin
    cv2.fillPoly(mask, [box.reshape(-1, 2).astype(np.int32)], (1,))
    region = bitmap[ymin : ymax + 1, xmin : xmax + 1]
    if region.dtype != np.uint8:  # a byte map is averaged as it is
        region = region.astype(np.float32, copy=False)
    return float(cv2.mean(region, mask)[0])


def _unclip(box: np.ndarray, unclip_ratio: float) -> np.ndarray:
    # Mirrors DBPostProcess.unclip: offset the quad by area * ratio / perimeter (round joins).
    area = cv2.contourArea(box)
    length = cv2.arcLength(box, True)
    distance = area * unclip_ratio / length
    offset = pyclipper.PyclipperOffset()
    offset.AddPath(box, pyclipper.JT_ROUND, pyclipper.ET_CLOSEDPOLYGON)
    paths = offset.Execute(distance)
    try:
        return np.array(paths)
    except ValueError:  # several paths of different lengths: PaddleX keeps the first
        return np.array(paths[0])
