"""PaddleX's `/ocr` pictures of a page (`inputImage`, `ocrImage`): JPEGs bounded in pixels and in
bytes, drawn in a CPU worker.

They are answered as base64 in the JSON body, so each page's two pictures are held by the main
process until the answer is sent, for every page of the document: unbounded, a 10-page PDF held
twenty 2000 x 2000 JPEGs (issue 37, item 3). Each picture is scaled to at most `max_pixels`, then
encoded at falling JPEG qualities, and scaled down further, until it fits in `max_bytes`.
"""

from __future__ import annotations

import base64
import math
from dataclasses import dataclass

import cv2
import numpy as np

from pipelines.types import PageResult

QUALITIES = (90, 75, 50)
"""JPEG qualities tried, best first, before a picture is scaled down further."""
MIN_SIDE_PX = 16


@dataclass(frozen=True, slots=True, kw_only=True)
class PictureLimits:
    """How large each picture may be (`[paddlex]`'s `visualize_max_pixels`, `_max_bytes`)."""

    max_pixels: int = 1_000_000
    max_bytes: int = 512 * 1024
    """Of the JPEG, before base64 (which adds a third)."""


def visualize_page(image: np.ndarray, result: PageResult, limits: PictureLimits) -> dict[str, str]:
    """PaddleX's `inputImage` and `ocrImage` as base64 JPEGs within `limits`.

    `ocrImage` draws the recognised boxes over the page; PaddleX adds a panel with the text
    rendered in a CJK font, which is left out here (the text is in `rec_texts`).
    """
    drawn = image.copy()
    for line in result.lines:
        cv2.polylines(drawn, [line.poly.astype(np.int32).reshape(-1, 1, 2)], True, (0, 0, 255), 2)
    return {"inputImage": jpeg_b64(image, limits), "ocrImage": jpeg_b64(drawn, limits)}


def jpeg_b64(image: np.ndarray, limits: PictureLimits) -> str:
    """`image` as a base64 JPEG of at most `limits.max_pixels` and `limits.max_bytes`.

    Raises:
        ValueError: OpenCV could not encode it.
    """
    h, w = image.shape[:2]
    scale = min(1.0, math.sqrt(limits.max_pixels / max(1, h * w)))
    while True:
        size = (max(1, int(w * scale)), max(1, int(h * scale)))
        scaled = image if size == (w, h) else cv2.resize(image, size, interpolation=cv2.INTER_AREA)
        for quality in QUALITIES:
            ok, buf = cv2.imencode(".jpg", scaled, [cv2.IMWRITE_JPEG_QUALITY, quality])
            if not ok:
                raise ValueError("JPEG encoding failed")
            if buf.size <= limits.max_bytes or min(size) <= MIN_SIDE_PX:
                return base64.b64encode(buf.tobytes()).decode("ascii")
        scale *= 0.7
