"""Properties of decoding: any bytes give BGR pages or a 4xx `OcrError`, never another exception.

Hypothesis runs each property on a fixed, bounded set of inputs (`tests/properties.py`).
"""

from __future__ import annotations

import functools
import io
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from PIL import Image

from serving.decode.documents import count_pages, decode_page, page_sizes
from serving.decode.readers import (
    DecodeLimits,
    FileKind,
    decode_image_page,
    frames_type,
    image_page_count,
    sniff_kind,
)
from serving.errors import InvalidInput, OcrError
from tests.images import make_pdf
from tests.pages import read_pages
from tests.properties import assert_bgr_image, counted, outcome

ROOMY = DecodeLimits(max_pdf_pages=8, pdf_render_scale=0.5, max_image_pixels=10**7)

_MAGIC = (
    b"\x89PNG\r\n\x1a\n",
    b"\xff\xd8\xff\xe0",
    b"GIF89a",
    b"BM",
    b"II*\x00",
    b"MM\x00*",
    b"RIFF\x00\x00\x00\x00WEBPVP8L",
    b"%PDF-1.4\n",
)

limits_st = st.builds(
    DecodeLimits,
    max_pdf_pages=st.integers(1, 4),
    pdf_render_scale=st.floats(0.05, 1.0),
    max_image_pixels=st.integers(1, 100_000),
)
# Random bytes, often behind a real signature so that they reach the format parsers.
junk_st = st.one_of(
    st.binary(max_size=2048),
    st.builds(bytes.__add__, st.sampled_from(_MAGIC), st.binary(max_size=2048)),
)


def decoded_or_refused(fn: Callable[[], list[np.ndarray]]) -> list[np.ndarray] | None:
    """`fn()`'s pages, checked, or None when it refused with a 4xx `OcrError`."""
    pages = outcome(fn)
    if isinstance(pages, OcrError):
        return None
    for page in pages:
        assert_bgr_image(page)
        assert page.flags.c_contiguous
    return pages


def check_document(data: bytes, kind: FileKind, limits: DecodeLimits) -> list[np.ndarray] | None:
    """Decode `data` as a request does (every page planned, then each decoded) and as a job does
    (counted, then each page sized and decoded alone); both agree, within `limits`."""
    assert sniff_kind(data) in (None, "pdf", "image")
    assert frames_type(data) in ("gif", "webp", "tiff")
    pages = decoded_or_refused(functools.partial(read_pages, data, kind, limits))
    if pages is None:
        return None
    assert 1 <= len(pages) <= limits.max_pdf_pages
    for page in pages:
        assert page.shape[0] * page.shape[1] <= limits.max_image_pixels
    if kind == "image":
        assert image_page_count(data) == len(pages)
    assert count_pages(data, kind) == len(pages)
    for index, page in enumerate(pages):
        assert page_sizes(data, kind, limits, index=index) == [(page.shape[1], page.shape[0])]
        np.testing.assert_array_equal(decode_page(data, kind, index, limits), page)
    return pages


@given(data=junk_st, kind=st.sampled_from(["image", "pdf"]), limits=limits_st)
@counted(max_examples=400)
def test_arbitrary_bytes_decode_or_refuse(
    data: bytes, kind: FileKind, limits: DecodeLimits
) -> None:
    check_document(data, kind, limits)
    count = outcome(functools.partial(count_pages, data, kind))
    assert isinstance(count, OcrError) or count >= 1


def _save(img: Image.Image, fmt: str, frames: list[Image.Image] | None = None) -> bytes:
    buf = io.BytesIO()
    options: dict[str, object] = {"lossless": True} if fmt == "WEBP" else {}
    if frames:
        options.update(save_all=True, append_images=frames)
    img.save(buf, format=fmt, **options)
    return buf.getvalue()


def _noise(seed: int, width: int, height: int) -> Image.Image:
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))


@functools.cache
def _valid_file(fmt: str) -> bytes:
    if fmt == "PDF":
        return make_pdf([np.asarray(_noise(1, 40, 30)), np.asarray(_noise(2, 20, 50))], dpi=72)
    frames = [_noise(i, 24, 16) for i in range(3)] if fmt in ("TIFF", "GIF") else None
    return _save(_noise(0, 24, 16), fmt, frames[1:] if frames else None)


@st.composite
def mutated_st(draw: st.DrawFn) -> tuple[str, bytes]:
    """A valid file of some format, truncated, with bytes overwritten, inserted or deleted."""
    fmt = draw(st.sampled_from(["PNG", "JPEG", "TIFF", "GIF", "BMP", "WEBP", "PDF"]))
    data = bytearray(_valid_file(fmt))
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(data)))
        op = draw(st.sampled_from(["truncate", "overwrite", "insert", "delete"]))
        chunk = draw(st.binary(min_size=1, max_size=8))
        if op == "truncate":
            del data[at:]
        elif op == "overwrite":
            data[at : at + len(chunk)] = chunk
        elif op == "insert":
            data[at:at] = chunk
        else:
            del data[at : at + len(chunk)]
    return fmt, bytes(data)


@given(file=mutated_st(), limits=st.one_of(st.just(ROOMY), limits_st))
@counted(max_examples=400)
def test_mutated_files_decode_or_refuse(file: tuple[str, bytes], limits: DecodeLimits) -> None:
    fmt, data = file
    check_document(data, "pdf" if fmt == "PDF" else "image", limits)


# --- valid images of any size and mode round-trip ---------------------------------------------

_LOSSLESS = {
    "PNG": ("1", "L", "LA", "P", "RGB", "RGBA", "I;16"),
    "TIFF": ("1", "L", "LA", "P", "RGB", "RGBA", "CMYK", "I;16"),
    "BMP": ("1", "L", "P", "RGB"),
    "WEBP": ("RGB", "RGBA"),
    "GIF": ("L", "P"),
    "JPEG": ("L", "RGB", "CMYK"),
}
_FORMAT_MODES = [(fmt, mode) for fmt, modes in _LOSSLESS.items() for mode in modes]


def _image(mode: str, width: int, height: int, seed: int) -> tuple[Image.Image, np.ndarray]:
    """An image of `mode` and the 8-bit values each pixel holds (for I;16: value / 256)."""
    rng = np.random.default_rng(seed)
    if mode == "I;16":
        raw = rng.integers(0, 65536, (height, width), dtype=np.uint16)
        return Image.fromarray(raw), raw / 256.0
    img = _noise(seed, width, height)
    img = img.quantize(16) if mode == "P" else img.convert(mode)
    return img, np.asarray(img.convert("RGB"), dtype=np.float64)[:, :, ::-1]


@given(
    format_mode=st.sampled_from(_FORMAT_MODES),
    width=st.integers(1, 300),
    height=st.integers(1, 300),
    seed=st.integers(0, 2**32 - 1),
)
@counted(max_examples=150)
def test_valid_images_round_trip(
    format_mode: tuple[str, str], width: int, height: int, seed: int
) -> None:
    fmt, mode = format_mode
    img, expected = _image(mode, width, height, seed)
    data = _save(img, fmt)
    assert sniff_kind(data) == "image"
    (page,) = check_document(data, "image", ROOMY) or pytest.fail(f"{fmt} {mode} refused")
    assert page.shape == (height, width, 3)
    if fmt == "JPEG":  # lossy: compare with PIL's decoding of the same bytes
        expected = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))[:, :, ::-1]
    diff = np.abs(page - (expected if expected.ndim == 3 else expected[:, :, np.newaxis]))
    assert diff.max() <= (0 if mode in ("1", "L", "LA", "P", "RGB", "RGBA") else 1)


@given(
    fmt=st.sampled_from(["TIFF", "GIF", "WEBP"]),
    frames=st.integers(1, 6),
    width=st.integers(1, 64),
    height=st.integers(1, 64),
    max_pages=st.integers(1, 6),
)
@counted(max_examples=60)
def test_multi_frame_images_one_page_per_frame_or_refused(
    fmt: str, frames: int, width: int, height: int, max_pages: int
) -> None:
    # Distinct frames: GIF and WebP writers merge identical consecutive ones.
    images = [_noise(i, width, height) for i in range(frames)]
    data = _save(images[0], fmt, images[1:])
    limits = DecodeLimits(max_pdf_pages=max_pages, pdf_render_scale=1.0, max_image_pixels=10**6)
    if frames > max_pages:
        with pytest.raises(InvalidInput, match=r"input\.max_pdf_pages"):
            read_pages(data, "image", limits)
        return
    pages = check_document(data, "image", limits) or pytest.fail(f"{fmt} refused")
    assert len(pages) == frames
    assert image_page_count(data) == frames
    assert all(page.shape == (height, width, 3) for page in pages)
    assert decode_image_page(data, frames - 1, limits).shape == (height, width, 3)


@given(
    sizes=st.lists(st.tuples(st.integers(10, 120), st.integers(10, 120)), min_size=1, max_size=5),
    scale=st.floats(0.1, 1.5),
    max_pages=st.integers(1, 5),
)
@counted(max_examples=40)
def test_pdfs_render_every_page_or_refuse(
    sizes: list[tuple[int, int]], scale: float, max_pages: int
) -> None:
    pdf = make_pdf([np.zeros((h, w, 3), np.uint8) for w, h in sizes], dpi=72)
    limits = DecodeLimits(max_pdf_pages=max_pages, pdf_render_scale=scale, max_image_pixels=10**6)
    assert sniff_kind(pdf) == "pdf"
    if len(sizes) > max_pages:
        with pytest.raises(InvalidInput, match=r"input\.max_pdf_pages"):
            read_pages(pdf, "pdf", limits)
        return
    pages = check_document(pdf, "pdf", limits) or pytest.fail("PDF refused")
    assert len(pages) == len(sizes)
    for page, (w, h) in zip(pages, sizes, strict=True):
        # One point per pixel at 72 dpi; pdfium rounds the scaled size either way.
        assert abs(page.shape[1] - w * scale) <= 1
        assert abs(page.shape[0] - h * scale) <= 1
