"""Textline-orientation preprocessing: resize line crops to the classifier input and batch them."""

from __future__ import annotations

from collections.abc import Sequence

import cv2
import numpy as np

from pipelines.pixels import Pixels, normalize
from pipelines.types import ClsParams

# NormalizeImage from PP-LCNet_x1_0_textline_ori's inference.yml (scale 1/255, ImageNet mean/std,
# the detector's constants: `pipelines.pixels`), applied after PaddleX's ReadImage(format="RGB")
# turned the BGR crop into RGB.


def preprocess_cls(crop: np.ndarray, params: ClsParams) -> np.ndarray:
    """Prepares one crop for the textline-orientation classifier as PaddleX does.

    Mirrors `ClasRunnerPredictor` with the model's inference.yml: `ReadImage(format="RGB")`
    (BGR to RGB; that predictor has no DecodeImage op), `ResizeImage(size=[160, 80])` (cv2,
    bilinear, skipped when the size already matches, no aspect ratio kept), `NormalizeImage`
    (per channel `x * scale / std - mean / std` in float32) and `ToCHWImage`.

    Args:
        crop: BGR uint8 line crop of shape (h, w, 3).
        params: Classifier input size.

    Returns:
        float32 array of shape (3, image_height, image_width).

    Raises:
        ValueError: If the crop is not (h, w, 3) with positive sides.
    """
    tensor: np.ndarray = normalize("cls", resize_cls(crop, params)[np.newaxis])[0]
    return tensor


def resize_cls(crop: np.ndarray, params: ClsParams) -> np.ndarray:
    """`preprocess_cls` less the normalisation: uint8 RGB (3, image_height, image_width).

    Raises:
        ValueError: If the crop is not (h, w, 3) with positive sides.
    """
    if crop.ndim != 3 or crop.shape[2] != 3 or crop.shape[0] < 1 or crop.shape[1] < 1:
        raise ValueError(f"expected a BGR crop of shape (h, w, 3), got {crop.shape}")
    rgb = cv2.cvtColor(crop, cv2.COLOR_BGR2RGB)
    width, height = params.image_width, params.image_height
    if rgb.shape[1] != width or rgb.shape[0] != height:
        rgb = cv2.resize(rgb, (width, height), interpolation=cv2.INTER_LINEAR)
    return rgb.transpose((2, 0, 1))


def plan_cls_batches(
    crops: Sequence[np.ndarray], params: ClsParams
) -> list[tuple[tuple[int, ...], Pixels]]:
    """Cuts a page's crops into classifier batches, in order, as PaddleOCR's pipeline does.

    Args:
        crops: The page's BGR line crops, in `dt_polys` order.
        params: Classifier input size and batch size.

    Returns:
        (indices into `crops`, uint8 pixels of shape (n, 3, image_height, image_width)) pairs.
    """
    batches: list[tuple[tuple[int, ...], Pixels]] = []
    for start in range(0, len(crops), params.batch_size):
        indices = tuple(range(start, min(start + params.batch_size, len(crops))))
        batches.append((indices, Pixels(np.stack([resize_cls(crops[i], params) for i in indices]))))
    return batches
