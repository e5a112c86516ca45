"""Job documents read page by page: multi-frame images give one page per frame."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from serving.documents import count_pages, decode_page
from serving.errors import InvalidInput
from serving.inputs import DecodeLimits, decode_frames
from tests import images

LIMITS = DecodeLimits(max_pdf_pages=2, pdf_render_scale=2.0, max_image_pixels=10_000_000)
COLOURS = [(255, 0, 0), (0, 255, 0), (0, 0, 255)]  # RGB


def tiff(frames: int) -> bytes:
    pages = [Image.new("RGB", (40, 30), COLOURS[i % 3]) for i in range(frames)]
    buf = io.BytesIO()
    pages[0].save(buf, format="TIFF", save_all=True, append_images=pages[1:])
    return buf.getvalue()


def test_multi_frame_tiff_is_one_page_per_frame_in_jobs(tmp_path) -> None:
    data = tiff(3)
    path = tmp_path / "scan.tiff"
    path.write_bytes(data)
    assert count_pages(path, "image") == 3
    for index, (r, g, b) in enumerate(COLOURS):
        page = decode_page(path, "image", index, LIMITS)
        assert page.shape == (30, 40, 3)
        assert page[0, 0].tolist() == [b, g, r]  # BGR
    with pytest.raises(InvalidInput, match="no page 4"):
        decode_page(path, "image", 3, LIMITS)
    # A request is capped by input.max_pdf_pages (2 here); a job reads frame by frame instead.
    with pytest.raises(InvalidInput, match="max_pdf_pages"):
        decode_frames(data, LIMITS)


def test_single_images_and_pdfs() -> None:
    png = images.encode_png(images.latin_lines().image)
    assert count_pages(png, "image") == 1
    assert np.array_equal(decode_page(png, "image", 0, LIMITS), images.latin_lines().image)
    with pytest.raises(InvalidInput):
        decode_page(png, "image", 1, LIMITS)
    pdf = images.make_pdf([images.empty_page(100, 80)] * 2, dpi=144.0)
    assert count_pages(pdf, "pdf") == 2
    assert decode_page(pdf, "pdf", 1, LIMITS).shape == (80, 100, 3)
