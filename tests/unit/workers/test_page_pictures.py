"""`/ocr`'s pictures stay within their limits in pixels and bytes (issue 37, item 3): before, each
was up to 2000 x 2000 at JPEG quality 95, several MB for a page that compresses badly."""

from __future__ import annotations

import base64

import cv2
import numpy as np
import pytest

from pipelines.types import PageResult
from serving.workers.page_pictures import PictureLimits, jpeg_b64, visualize_page


def _noise(height: int, width: int) -> np.ndarray:
    return np.random.default_rng(0).integers(0, 256, (height, width, 3), dtype=np.uint8)


def _decoded(b64: str) -> tuple[int, np.ndarray]:
    data = base64.b64decode(b64)
    image = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    return len(data), image


@pytest.mark.parametrize(
    ("limits", "shape"),
    [
        (PictureLimits(), (3000, 2000)),
        (PictureLimits(max_pixels=250_000, max_bytes=1 << 20), (3000, 2000)),
        (PictureLimits(max_pixels=4_000_000, max_bytes=64 * 1024), (2000, 2000)),
    ],
)
def test_each_picture_fits_its_pixels_and_bytes(
    limits: PictureLimits, shape: tuple[int, int]
) -> None:
    size, image = _decoded(jpeg_b64(_noise(*shape), limits))
    assert size <= limits.max_bytes
    assert image.shape[0] * image.shape[1] <= limits.max_pixels
    assert abs(image.shape[0] / image.shape[1] - shape[0] / shape[1]) < 0.01  # not distorted


def test_a_small_plain_page_is_kept_as_it_is() -> None:
    page = np.full((300, 400, 3), 255, np.uint8)
    pictures = visualize_page(page, PageResult(lines=[], width=400, height=300), PictureLimits())
    assert set(pictures) == {"inputImage", "ocrImage"}
    for b64 in pictures.values():
        assert _decoded(b64)[1].shape == (300, 400, 3)
