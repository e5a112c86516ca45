"""Detection preprocessing: resize a BGR page to multiples of 32, as uint8 CHW pixels; the model's
float32 input is normalised where it runs (`pipelines.pixels`)."""

from __future__ import annotations

import cv2
import numpy as np

from pipelines.types import DetInput, DetParams


def preprocess_det(image: np.ndarray, params: DetParams) -> DetInput:
    """Prepares one page for the text detector exactly as PaddleX's detection predictor does.

    Args:
        image: BGR uint8 image of shape (H, W, 3).
        params: Resize limits.

    Returns:
        The resized (3, H', W') uint8 pixels (`DetInput.tensor`: the normalised float32 tensor),
        with the source size and the resize ratios.

    Raises:
        ValueError: If the image is not (H, W, 3) with positive sides, or the limit type is unknown.
    """
    if image.ndim != 3 or image.shape[2] != 3 or image.shape[0] < 1 or image.shape[1] < 1:
        raise ValueError(f"expected a BGR image of shape (H, W, 3), got {image.shape}")
    src_h, src_w = int(image.shape[0]), int(image.shape[1])
    img = image
    if src_h + src_w < 64:
        img = _pad_to_32(img)
    img, ratio_h, ratio_w = _resize_type0(img, params)
    return DetInput(
        pixels=np.ascontiguousarray(img.transpose((2, 0, 1))),
        src_h=src_h,
        src_w=src_w,
        ratio_h=ratio_h,
        ratio_w=ratio_w,
    )


def _pad_to_32(img: np.ndarray) -> np.ndarray:
    # DetResizeForTest.image_padding: zero pad bottom/right to at least 32 x 32.
    h, w, c = img.shape
    padded = np.zeros((max(32, h), max(32, w), c), np.uint8)
    padded[:h, :w, :] = img
    return padded


def _resize_type0(img: np.ndarray, params: DetParams) -> tuple[np.ndarray, float, float]:
    # Mirrors DetResizeForTest.resize_image_type0 (PaddleX 3.7.2).
    h, w = int(img.shape[0]), int(img.shape[1])
    resize_h, resize_w = det_input_size(h, w, params)
    if resize_h == h and resize_w == w:
        return img, 1.0, 1.0
    resized = cv2.resize(img, (resize_w, resize_h))
    return resized, resize_h / float(h), resize_w / float(w)


def det_input_size(h: int, w: int, params: DetParams) -> tuple[int, int]:
    """(H', W') the detector sees for an (h, w) page: what the memory budget charges before any
    pixel is decoded. Pages under 32 x 32 are padded to 32 first (`preprocess_det`)."""
    if h + w < 64:
        h, w = max(32, h), max(32, w)
    limit = params.limit_side_len
    if params.limit_type == "max":
        ratio = (float(limit) / h if h > w else float(limit) / w) if max(h, w) > limit else 1.0
    elif params.limit_type == "min":
        ratio = (float(limit) / h if h < w else float(limit) / w) if min(h, w) < limit else 1.0
    elif params.limit_type == "resize_long":
        ratio = float(limit) / max(h, w)
    else:
        raise ValueError(f"unsupported limit_type {params.limit_type!r}")
    resize_h = int(h * ratio)
    resize_w = int(w * ratio)
    if max(resize_h, resize_w) > params.max_side_limit:
        ratio = float(params.max_side_limit) / max(resize_h, resize_w)
        resize_h, resize_w = int(resize_h * ratio), int(resize_w * ratio)
    return max(round(resize_h / 32) * 32, 32), max(round(resize_w / 32) * 32, 32)


def det_bucket(h: int, w: int, step: int) -> tuple[int, int]:
    """Bucketed batching: the (H, W) a detector input of (h, w) is padded to, each side rounded
    up to a multiple of `step` (`DetParams.pad_step_px`); (h, w) itself when `step` is 0."""
    if step <= 0:
        return h, w
    return -(-h // step) * step, -(-w // step) * step


def pad_det_input(tensor: np.ndarray, step: int) -> np.ndarray:
    """A (C, H, W) detector input zero-padded at the bottom and right to its `det_bucket`; the
    tensor itself when it is already that size."""
    c, h, w = tensor.shape
    bucket_h, bucket_w = det_bucket(h, w, step)
    if (bucket_h, bucket_w) == (h, w):
        return tensor
    padded = np.zeros((c, bucket_h, bucket_w), tensor.dtype)
    padded[:, :h, :w] = tensor
    return padded
