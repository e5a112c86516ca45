"""Textline-orientation postprocessing: pick each crop's class and turn upside-down crops."""

from __future__ import annotations

from collections.abc import Sequence

import cv2
import numpy as np

_UPSIDE_DOWN = 1


def classify_orientation(probs: np.ndarray, min_upside_down_score: float = 0.0) -> list[int]:
    """Picks the top-1 class per crop as PaddleX's Topk(topk=1) does.

    Topk takes the last entry of `argsort`, not `argmax`; on exact ties that picks the later
    class, so the same call is used here.

    Args:
        probs: Class probabilities, shape (n, num_classes).
        min_upside_down_score: An upside-down crop must score above this to be called so
            (PaddleOCR 2.x's `cls_thresh`); 0.0 (PaddleX): the top class decides.

    Returns:
        One class id per crop (0: upright, 1: upside down).
    """
    values = np.asarray(probs)
    top = values.argsort(axis=1)[:, -1]
    return [
        int(i) if i != _UPSIDE_DOWN or row[i] > min_upside_down_score else 0
        for i, row in zip(top, values, strict=True)
    ]


def apply_orientation(crops: Sequence[np.ndarray], class_ids: Sequence[int]) -> list[np.ndarray]:
    """Turns class-1 crops by 180 degrees as PaddleX's OCR pipeline (`rotate_image`) does.

    Args:
        crops: BGR line crops.
        class_ids: One class id per crop, 0 or 1.

    Returns:
        The crops; class-0 ones are returned as they are.

    Raises:
        ValueError: If the lengths differ or a class id is not 0 or 1.
    """
    if len(crops) != len(class_ids):
        raise ValueError(f"{len(crops)} crops but {len(class_ids)} class ids")
    if any(c not in (0, 1) for c in class_ids):
        raise ValueError(f"class ids must be 0 or 1, got {list(class_ids)}")
    return [
        _rotate_180(c) if k == _UPSIDE_DOWN else c for c, k in zip(crops, class_ids, strict=True)
    ]


def _rotate_180(image: np.ndarray) -> np.ndarray:
    # Mirrors paddlex rotate_image(image, 180): a bicubic warpAffine about (w/2, h/2) with a
    # black constant border. That maps pixel x to w - x (not w - 1 - x), so the result is shifted
    # by one pixel against np.rot90(image, 2), with a black first row and column.
    h, w = image.shape[:2]
    mat = cv2.getRotationMatrix2D((w / 2, h / 2), 180, 1.0)
    cos, sin = np.abs(mat[0, 0]), np.abs(mat[0, 1])
    new_w = int((h * sin) + (w * cos))
    new_h = int((h * cos) + (w * sin))
    mat[0, 2] += (new_w - w) / 2
    mat[1, 2] += (new_h - h) / 2
    rotated: np.ndarray = cv2.warpAffine(image, mat, (new_w, new_h), flags=cv2.INTER_CUBIC)
    return rotated
