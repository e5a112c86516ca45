"""Recognition preprocessing: resize line crops to the model height and pad them into chunks.

Chunks hold uint8 pixels (`pipelines.pixels`); the model's float32 input is normalised where it
runs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import cv2
import numpy as np

from pipelines.pixels import Pixels, normalize
from pipelines.types import RecChunk, RecParams


def resize_norm_rec(crop: np.ndarray, max_wh_ratio: float, params: RecParams) -> np.ndarray:
    """Resizes and normalises one crop as PaddleX's OCRReisizeNormImg.resize_norm_img does.

    The target width is `int(image_height * max_wh_ratio)`. Above `params.max_width` the crop is
    squeezed to exactly `max_width` (distorting it); otherwise it keeps its aspect ratio (capped
    at the target width) and is zero-padded on the right. Values are scaled to [-1, 1], BGR.

    Args:
        crop: BGR uint8 line crop of shape (h, w, 3).
        max_wh_ratio: Width-to-height ratio that sets the padded width.
        params: Model input height and width cap.

    Returns:
        float32 array of shape (3, image_height, target width).

    Raises:
        ValueError: If the crop is not (h, w, 3) with positive sides.
    """
    resized, img_w = resize_rec(crop, max_wh_ratio, params)
    padded = np.zeros((1, 3, params.image_height, img_w), dtype=np.uint8)
    padded[0, :, :, : resized.shape[2]] = resized
    tensor: np.ndarray = normalize("rec", padded, ((params.image_height, resized.shape[2]),))[0]
    return tensor


def resize_rec(crop: np.ndarray, max_wh_ratio: float, params: RecParams) -> tuple[np.ndarray, int]:
    """`resize_norm_rec` less the normalisation: the resized crop, uint8 (3, image_height,
    resized width), and the target width it is padded to.

    Raises:
        ValueError: If the crop is not (h, w, 3) with positive sides.
    """
    if crop.ndim != 3 or crop.shape[2] != 3 or crop.shape[0] < 1 or crop.shape[1] < 1:
        raise ValueError(f"expected a BGR crop of shape (h, w, 3), got {crop.shape}")
    img_h = params.image_height
    img_w = int(img_h * max_wh_ratio)
    if img_w > params.max_width:
        resized = cv2.resize(crop, (params.max_width, img_h))
        img_w = params.max_width
    else:
        h, w = crop.shape[:2]
        ratio = w / float(h)
        resized_w = img_w if math.ceil(img_h * ratio) > img_w else math.ceil(img_h * ratio)
        resized = cv2.resize(crop, (resized_w, img_h))
    return resized.transpose((2, 0, 1)), img_w


def plan_rec_chunks(crops: Sequence[np.ndarray], params: RecParams) -> list[RecChunk]:
    """Groups one page's crops into padded recognition batches as PaddleOCR's pipeline does.

    Crops are stably sorted by width/height ascending and cut into chunks of `batch_size`. Each
    crop is normalised with its own ratio `max(min_width / image_height, w / h)`; each chunk is
    then zero-padded to its widest member and stacked. Recognition scores depend on this padding,
    so reproducing it is what makes results match PaddleOCR. With `params.pad_widths_px`
    (bucketed batching) the sorted crops are first grouped by width bucket, and each chunk is
    padded to its bucket instead (`_width_groups`): not PaddleOCR's padding.

    Args:
        crops: The page's BGR line crops, in `dt_polys` order.
        params: Recognition input shape and batch size.

    Returns:
        The chunks, in sorted order; `indices` point back into `crops`.
    """
    ratios = [c.shape[1] / float(c.shape[0]) for c in crops]
    order = sorted(range(len(crops)), key=lambda i: ratios[i])
    base_ratio = params.min_width / params.image_height
    # OCRReisizeNormImg.resize: max_wh_ratio = max(imgW / imgH, w * 1.0 / h), per crop.
    crop_ratios = [max(base_ratio, ratio) for ratio in ratios]
    groups = [(0, order)]
    if params.pad_widths_px:
        groups = _width_groups(order, crop_ratios, params)
    chunks: list[RecChunk] = []
    for width, members in groups:
        for start in range(0, len(members), params.batch_size):
            indices = tuple(members[start : start + params.batch_size])
            images = [resize_rec(crops[i], crop_ratios[i], params) for i in indices]
            chunks.append(RecChunk(indices=indices, pixels=_pad_and_stack(images, width)))
    return chunks


def rec_input_width(max_wh_ratio: float, params: RecParams) -> int:
    """The width `resize_norm_rec` gives a crop normalised with `max_wh_ratio`."""
    return min(int(params.image_height * max_wh_ratio), params.max_width)


def width_bucket(width: int, widths: Sequence[int]) -> int:
    """The first of `widths` (ascending) that holds `width`; `width` itself beyond the last."""
    return next((bucket for bucket in widths if bucket >= width), width)


def _width_groups(
    order: Sequence[int], crop_ratios: Sequence[float], params: RecParams
) -> list[tuple[int, list[int]]]:
    """Bucketed batching: the crops (in `order`) grouped by the width bucket that holds each,
    narrowest first; each chunk is then padded to its bucket, whatever its companions, so a
    crop reads the same in any batch, and chunks of one bucket from any page batch together."""
    groups: dict[int, list[int]] = {}
    for i in order:
        width = width_bucket(rec_input_width(crop_ratios[i], params), params.pad_widths_px)
        groups.setdefault(width, []).append(i)
    return sorted(groups.items())


def _pad_and_stack(images: list[tuple[np.ndarray, int]], width: int = 0) -> Pixels:
    # Mirrors text_recognition ToBatch: pad on the right to the widest target width (or to
    # `width`, bucketed batching's), then stack; uint8, the padding 0.0 once normalised.
    max_width = max(width, *(img_w for _, img_w in images))
    channels, height = images[0][0].shape[:2]
    batch = np.zeros((len(images), channels, height, max_width), dtype=np.uint8)
    for k, (img, _) in enumerate(images):
        batch[k, :, :, : img.shape[2]] = img
    return Pixels(batch, tuple((height, img.shape[2]) for img, _ in images))
