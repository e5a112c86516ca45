"""Recognition preprocessing: resize line crops to the model height and pad them into chunks."""

from __future__ import annotations

import math
from collections.abc import Sequence

import cv2
import numpy as np

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
    if crop.ndim != 3 or crop.shape[2] != 3 or crop.shape[0] < 1 or crop.shape[1] < 1:
        raise ValueError(f"expected a BGR crop of shape (h, w, 3), got {crop.shape}")
    img_h = params.image_height
    img_w = int(img_h * max_wh_ratio)
    if img_w > params.max_width:
        resized = cv2.resize(crop, (params.max_width, img_h))
        resized_w = img_w = params.max_width
    else:
        h, w = crop.shape[:2]
        ratio = w / float(h)
        resized_w = img_w if math.ceil(img_h * ratio) > img_w else math.ceil(img_h * ratio)
        resized = cv2.resize(crop, (resized_w, img_h))
    # Same float32 operations, in the same order, as PaddleX.
    norm = resized.astype(np.float32).transpose((2, 0, 1)) / 255
    norm -= 0.5
    norm /= 0.5
    padded = np.zeros((3, img_h, img_w), dtype=np.float32)
    padded[:, :, 0:resized_w] = norm
    return padded


def plan_rec_chunks(crops: Sequence[np.ndarray], params: RecParams) -> list[RecChunk]:
    """Groups one page's crops into padded recognition batches as PaddleOCR's pipeline does.

    Crops are stably sorted by width/height ascending and cut into chunks of `batch_size`. Each
    crop is normalised with its own ratio `max(min_width / image_height, w / h)`; each chunk is
    then zero-padded to its widest member and stacked. Recognition scores depend on this padding,
    so reproducing it is what makes results match PaddleOCR.

    Args:
        crops: The page's BGR line crops, in `dt_polys` order.
        params: Recognition input shape and batch size.

    Returns:
        The chunks, in sorted order; `indices` point back into `crops`.
    """
    ratios = [c.shape[1] / float(c.shape[0]) for c in crops]
    order = sorted(range(len(crops)), key=lambda i: ratios[i])
    base_ratio = params.min_width / params.image_height
    chunks: list[RecChunk] = []
    for start in range(0, len(order), params.batch_size):
        indices = tuple(order[start : start + params.batch_size])
        # OCRReisizeNormImg.resize: max_wh_ratio = max(imgW / imgH, w * 1.0 / h), per crop.
        images = [resize_norm_rec(crops[i], max(base_ratio, ratios[i]), params) for i in indices]
        chunks.append(RecChunk(indices=indices, tensor=_pad_and_stack(images)))
    return chunks


def _pad_and_stack(images: list[np.ndarray]) -> np.ndarray:
    # Mirrors text_recognition ToBatch: zero-pad on the right to the widest, then stack.
    max_width = max(img.shape[2] for img in images)
    batch = np.zeros((len(images), *images[0].shape[:2], max_width), dtype=np.float32)
    for k, img in enumerate(images):
        batch[k, :, :, : img.shape[2]] = img
    return batch
