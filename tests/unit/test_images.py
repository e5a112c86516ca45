"""Unit tests for the deterministic test-image renderers and encoders in tests/images.py."""

from __future__ import annotations

import io
from collections.abc import Callable

import numpy as np
import pypdfium2 as pdfium
import pytest
from PIL import Image

from tests import images
from tests.images import TextImage

RENDERERS: list[Callable[[], TextImage]] = [
    images.latin_lines,
    images.chinese_lines,
    images.rotated_line,
    images.dense_page,
]


def _is_bgr_u8(img: np.ndarray) -> bool:
    return img.dtype == np.uint8 and img.ndim == 3 and img.shape[2] == 3 and img.flags.c_contiguous


@pytest.mark.parametrize("render", RENDERERS, ids=lambda f: f.__name__)
def test_renderer_shape_dtype_and_ink(render: Callable[[], TextImage]) -> None:
    img, lines = render()
    assert _is_bgr_u8(img)
    assert img.shape[0] >= 100
    assert img.shape[1] >= 300
    assert lines
    assert all(line.strip() for line in lines)
    ink = (img < 128).any(axis=2).mean()
    assert 0.002 < ink < 0.2  # text drawn, yet mostly white background
    assert (img[0, 0] == 255).all()  # white margin


@pytest.mark.parametrize("render", RENDERERS, ids=lambda f: f.__name__)
def test_renderer_is_deterministic(render: Callable[[], TextImage]) -> None:
    first, second = render(), render()
    assert images.encode_png(first.image) == images.encode_png(second.image)
    assert first.lines == second.lines


def test_dense_page_is_a4_at_150dpi_with_two_font_sizes() -> None:
    img, lines = images.dense_page()
    assert img.shape == (1754, 1240, 3)
    assert 30 <= len(lines) <= 50
    assert images.dense_page(seed=1).lines != lines
    with pytest.raises(ValueError, match="n_lines"):
        images.dense_page(n_lines=60)


def test_chinese_lines_mix_han_and_digits() -> None:
    _, lines = images.chinese_lines()
    text = "".join(lines)
    assert any("\u4e00" <= ch <= "\u9fff" for ch in text)
    assert any(ch.isdigit() for ch in text)


def test_rotated_line_is_tilted() -> None:
    img, _ = images.rotated_line(25.0)
    rows, cols = np.nonzero((img < 128).any(axis=2))
    slope = np.polyfit(cols, rows, 1)[0]  # image rows grow downwards
    assert -0.6 < slope < -0.3  # tan(25 deg) ~ 0.47


def test_empty_page_is_blank_white() -> None:
    page = images.empty_page()
    assert page.shape == (1754, 1240, 3)
    assert page.dtype == np.uint8
    assert (page == 255).all()
    assert images.empty_page(100, 50).shape == (50, 100, 3)


def test_png_roundtrip_keeps_pixels_and_channel_order() -> None:
    img, _ = images.latin_lines()
    img = img.copy()
    img[:10, :10] = (255, 0, 0)  # pure blue in BGR
    data = images.encode_png(img)
    assert data.startswith(b"\x89PNG")
    assert data == images.encode_png(img)
    decoded = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))[:, :, ::-1]
    assert np.array_equal(decoded, img)


def test_jpeg_is_deterministic_and_decodes() -> None:
    img, _ = images.chinese_lines()
    data = images.encode_jpeg(img)
    assert data.startswith(b"\xff\xd8")
    assert data == images.encode_jpeg(img)
    with Image.open(io.BytesIO(data)) as decoded:
        assert decoded.size == (img.shape[1], img.shape[0])


def test_make_pdf_pages_sizes_and_determinism() -> None:
    latin, _ = images.latin_lines()
    pages = [latin, images.empty_page()]
    data = images.make_pdf(pages)
    assert data.startswith(b"%PDF-")
    assert data == images.make_pdf(pages)
    doc = pdfium.PdfDocument(data)
    try:
        assert len(doc) == 2
        for i, img in enumerate(pages):
            width_pt, height_pt = doc[i].get_size()
            assert width_pt == pytest.approx(img.shape[1] * 72 / 150, abs=0.5)
            assert height_pt == pytest.approx(img.shape[0] * 72 / 150, abs=0.5)
    finally:
        doc.close()
    with pytest.raises(ValueError, match="at least one"):
        images.make_pdf([])


def test_encoders_reject_non_uint8() -> None:
    with pytest.raises(ValueError, match="uint8"):
        images.encode_png(np.zeros((4, 4, 3), dtype=np.float32))
