"""Deterministic test images (BGR uint8) with their ground-truth text, and PNG/JPEG/PDF encoders.

The text pages are the product's (`serving.engine.synthetic_pages`: the precision check reads
them too), re-exported here.
"""

from __future__ import annotations

import io
import time

import numpy as np
from PIL import Image, ImageDraw

from serving.engine.synthetic_pages import (
    A4_150DPI_PX,
    BLACK,
    CHINESE_LINES,
    LATIN_LINES,
    WHITE,
    FontNotFoundError,
    TextImage,
    chinese_lines,
    dense_page,
    font,
    latin_lines,
    to_bgr,
)

__all__ = [
    "A4_150DPI_PX",
    "CHINESE_LINES",
    "LATIN_LINES",
    "FontNotFoundError",
    "TextImage",
    "chinese_lines",
    "dense_page",
    "dense_page_top",
    "empty_page",
    "encode_jpeg",
    "encode_png",
    "latin_lines",
    "make_pdf",
    "rotated_line",
]

_FIXED_PDF_DATE = time.gmtime(1_704_067_200)  # 2024-01-01T00:00:00Z; PIL wants a struct_time
ROTATED_TEXT = "Rotated line 42 reads fine"
_font = font
"""The renderers' fonts (tests/e2e/test_outputs.py draws with them too)."""


def dense_page_top(n_lines: int) -> TextImage:
    """The dense page's first `n_lines` lines (the same lines `dense_page()` draws first, its
    full width), cropped 60 px below the last: for tests that read the dense page's kind of text
    but not all 40 lines of it."""
    page = dense_page(n_lines=n_lines)
    inked = np.flatnonzero((page.image < 128).any(axis=(1, 2)))
    return TextImage(page.image[: int(inked[-1]) + 60], page.lines)


def rotated_line(angle_deg: float = 20.0) -> TextImage:
    """One Latin line rotated counter-clockwise by ``angle_deg`` on a larger white canvas."""
    face = font("latin", 32)
    line = Image.new("RGB", (int(face.getlength(ROTATED_TEXT)) + 40, 70), WHITE)
    ImageDraw.Draw(line).text((20, 12), ROTATED_TEXT, font=face, fill=BLACK)
    rotated = line.rotate(
        angle_deg, resample=Image.Resampling.BICUBIC, expand=True, fillcolor=WHITE
    )
    canvas = Image.new("RGB", (rotated.width + 120, rotated.height + 120), WHITE)
    canvas.paste(rotated, (60, 60))
    return TextImage(to_bgr(canvas), [ROTATED_TEXT])


def empty_page(width_px: int = A4_150DPI_PX[0], height_px: int = A4_150DPI_PX[1]) -> np.ndarray:
    """A blank white BGR page."""
    return np.full((height_px, width_px, 3), 255, dtype=np.uint8)


def _to_pil(img: np.ndarray) -> Image.Image:
    if img.dtype != np.uint8 or img.ndim not in (2, 3):
        raise ValueError(f"expected a uint8 HxW or HxWx3 image, got {img.dtype} {img.shape}")
    if img.ndim == 2:
        return Image.fromarray(img)
    if img.shape[2] != 3:
        raise ValueError(f"expected 3 BGR channels, got shape {img.shape}")
    return Image.fromarray(np.ascontiguousarray(img[:, :, ::-1]))


def encode_png(img: np.ndarray) -> bytes:
    """Encode a BGR (or grayscale) uint8 image as PNG bytes."""
    buf = io.BytesIO()
    _to_pil(img).save(buf, format="PNG")
    return buf.getvalue()


def encode_jpeg(img: np.ndarray, *, quality: int = 90) -> bytes:
    """Encode a BGR (or grayscale) uint8 image as baseline JPEG bytes."""
    buf = io.BytesIO()
    _to_pil(img).save(buf, format="JPEG", quality=quality)
    return buf.getvalue()


def make_pdf(images: list[np.ndarray], *, dpi: float = 150.0) -> bytes:
    """Build a multi-page image-only PDF (no text layer), one page per image at ``dpi``.

    The dates in the PDF metadata are fixed, so the same images give the same bytes.
    """
    if not images:
        raise ValueError("make_pdf needs at least one image")
    pages = [_to_pil(img) for img in images]
    buf = io.BytesIO()
    pages[0].save(
        buf,
        format="PDF",
        save_all=True,
        append_images=pages[1:],
        resolution=dpi,
        creationDate=_FIXED_PDF_DATE,
        modDate=_FIXED_PDF_DATE,
    )
    return buf.getvalue()
