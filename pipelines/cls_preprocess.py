"""Textline-orientation preprocessing: resize line crops to the classifier input and batch them."""

from __future__ import annotations

import math
from collections.abc import Sequence

import cv2
import numpy as np

from pipelines.pixels import Pixels, normalize
from pipelines.stages import Stage
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
    pixels = _pad(resize_cls(crop, params), params)
    tensor: np.ndarray = normalize(cls_norm(params), pixels.data, pixels.sizes)[0]
    return tensor


def cls_norm(params: ClsParams) -> Stage:
    """How the classifier's pixels are normalised: as the recogniser's (PaddleOCR 2.x's
    classifiers) or with ImageNet's mean and std (PP-LCNet's)."""
    return "rec" if params.keep_ratio else "cls"


def resize_cls(crop: np.ndarray, params: ClsParams) -> np.ndarray:
    """`preprocess_cls` less the normalisation: uint8 RGB (3, image_height, image_width); with
    `params.keep_ratio`, uint8 BGR (3, image_height, w), w at most image_width (padded later).

    Raises:
        ValueError: If the crop is not (h, w, 3) with positive sides.
    """
    if crop.ndim != 3 or crop.shape[2] != 3 or crop.shape[0] < 1 or crop.shape[1] < 1:
        raise ValueError(f"expected a BGR crop of shape (h, w, 3), got {crop.shape}")
    if params.keep_ratio:
        # PaddleOCR 2.x's TextClassifier.resize_norm_img (RapidOCR 3.10's too): BGR kept.
        height, width = params.image_height, params.image_width
        ratio = crop.shape[1] / float(crop.shape[0])
        resized_w = min(width, math.ceil(height * ratio))
        resized = cv2.resize(crop, (resized_w, height), interpolation=cv2.INTER_LINEAR)
        return resized.transpose((2, 0, 1))
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
        rows = [_pad(resize_cls(crops[i], params), params) for i in indices]
        sizes = tuple(size for row in rows for size in row.sizes)
        data = np.concatenate([row.data for row in rows])
        batches.append((indices, Pixels(data, sizes, norm=cls_norm(params))))
    return batches


def _pad(resized: np.ndarray, params: ClsParams) -> Pixels:
    """One crop's pixels as a one-row batch at the classifier's full width: its own width in
    `sizes` (0.0 beyond it once normalised) where it is narrower."""
    _, height, width = resized.shape
    if width == params.image_width:
        return Pixels(resized[np.newaxis], ((height, width),) if params.keep_ratio else ())
    padded = np.zeros((1, 3, height, params.image_width), np.uint8)
    padded[0, :, :, :width] = resized
    return Pixels(padded, ((height, width),))
