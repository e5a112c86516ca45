"""Unit tests for serving/decode/readers.py: magic-byte sniffing, image decoding and PDF
rendering."""

from __future__ import annotations

import asyncio
import io

import numpy as np
import pytest
from PIL import Image
from starlette.requests import Request

from serving.decode.readers import DecodeLimits, decode_image, sniff_kind
from serving.errors import InvalidInput
from serving.http.uploads import read_document
from tests.images import encode_jpeg, encode_png, make_pdf
from tests.pages import read_pages

LIMITS = DecodeLimits(max_pdf_pages=10, pdf_render_scale=2.0, max_image_pixels=178_956_970)

RED_RGB = (255, 0, 0)
RED_BGR = [0, 0, 255]


def _pil_bytes(img: Image.Image, fmt: str, **kwargs: object) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format=fmt, **kwargs)
    return buf.getvalue()


def _pil_pdf(pages: list[Image.Image], *, dpi: float = 72.0) -> bytes:
    """Image-only PDF; at 72 dpi one pixel is one point."""
    buf = io.BytesIO()
    pages[0].save(buf, format="PDF", save_all=True, append_images=pages[1:], resolution=dpi)
    return buf.getvalue()


def _pattern(height: int = 24, width: int = 40) -> np.ndarray:
    """A BGR image with distinct quadrants, so orientation and channel order both show."""
    img = np.zeros((height, width, 3), np.uint8)
    img[: height // 2, : width // 2] = (255, 0, 0)  # blue
    img[: height // 2, width // 2 :] = (0, 255, 0)  # green
    img[height // 2 :, : width // 2] = (0, 0, 255)  # red
    img[height // 2 :, width // 2 :] = (255, 255, 255)
    return img


# --- sniff_kind -----------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["PNG", "JPEG", "GIF", "BMP", "TIFF", "WEBP"])
def test_sniff_real_images(fmt: str) -> None:
    data = _pil_bytes(Image.new("RGB", (5, 4), RED_RGB), fmt)
    assert sniff_kind(data) == "image"


def test_sniff_real_pdf() -> None:
    assert sniff_kind(_pil_pdf([Image.new("RGB", (10, 10))])) == "pdf"


@pytest.mark.parametrize(
    "head",
    [
        b"\x89PNG\r\n\x1a\n",
        b"\xff\xd8\xff\xe0",
        b"GIF87a",
        b"GIF89a",
        b"BM",
        b"II*\x00",
        b"MM\x00*",
        b"RIFF\x00\x00\x00\x00WEBPVP8 ",
    ],
)
def test_sniff_image_magic(head: bytes) -> None:
    assert sniff_kind(head + b"\x00" * 32) == "image"


def test_sniff_pdf_magic() -> None:
    assert sniff_kind(b"%PDF-1.7\n...") == "pdf"
    # Some PDFs carry junk before the header; it is found within the first KiB.
    assert sniff_kind(b"\x00" * 500 + b"%PDF-1.4\n") == "pdf"
    assert sniff_kind(b"\x00" * 2000 + b"%PDF-1.4\n") is None


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"hello world",
        b"\x89PNX\r\n\x1a\n",
        b"RIFF\x00\x00\x00\x00WAVEfmt ",
        b"PK\x03\x04",
        b"%PDF",
        b"<html>",
    ],
)
def test_sniff_garbage(data: bytes) -> None:
    assert sniff_kind(data) is None


# --- decode_image ---------------------------------------------------------------------------


def test_decode_png_exact() -> None:
    img = _pattern()
    out = decode_image(encode_png(img), LIMITS)
    assert out.dtype == np.uint8
    assert out.shape == (24, 40, 3)
    assert out.flags.c_contiguous
    np.testing.assert_array_equal(out, img)


def test_decode_jpeg_close() -> None:
    img = _pattern(64, 96)
    out = decode_image(encode_jpeg(img, quality=95), LIMITS)
    assert out.shape == (64, 96, 3)
    assert out.dtype == np.uint8
    # Lossy, but each quadrant's centre keeps its colour.
    assert np.abs(out[16, 24].astype(int) - [255, 0, 0]).max() < 40
    assert np.abs(out[16, 72].astype(int) - [0, 255, 0]).max() < 40
    assert np.abs(out[48, 24].astype(int) - [0, 0, 255]).max() < 40


def test_decode_red_pixel_is_bgr() -> None:
    data = _pil_bytes(Image.new("RGB", (3, 2), RED_RGB), "PNG")
    out = decode_image(data, LIMITS)
    assert out.shape == (2, 3, 3)
    assert out[0, 0].tolist() == RED_BGR
    assert (out == np.array(RED_BGR, np.uint8)).all()


def test_decode_grayscale_png_is_three_channel() -> None:
    gray = np.arange(12 * 10, dtype=np.uint8).reshape(12, 10)
    out = decode_image(encode_png(gray), LIMITS)
    assert out.shape == (12, 10, 3)
    for channel in range(3):
        np.testing.assert_array_equal(out[:, :, channel], gray)


def test_decode_rgba_png_drops_alpha() -> None:
    img = Image.new("RGBA", (6, 5), (255, 0, 0, 40))
    img.putpixel((1, 1), (0, 0, 255, 255))
    out = decode_image(_pil_bytes(img, "PNG"), LIMITS)
    assert out.shape == (5, 6, 3)
    assert out[0, 0].tolist() == RED_BGR  # alpha dropped, not blended
    assert out[1, 1].tolist() == [255, 0, 0]  # blue in BGR


# GIF is sniffed as an image but only OpenCV >= 4.11 decodes it, so it is left out here.
@pytest.mark.parametrize("fmt", ["BMP", "TIFF", "WEBP"])
def test_decode_other_formats(fmt: str) -> None:
    kwargs = {"lossless": True} if fmt == "WEBP" else {}
    out = decode_image(_pil_bytes(Image.new("RGB", (7, 3), RED_RGB), fmt, **kwargs), LIMITS)
    assert out.shape == (3, 7, 3)
    assert out[1, 3].tolist() == RED_BGR


@pytest.mark.parametrize("data", [b"", b"garbage", b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff" * 10])
def test_decode_invalid(data: bytes) -> None:
    with pytest.raises(InvalidInput, match="Invalid input file") as info:
        decode_image(data, LIMITS)
    assert info.value.http_status == 422


@pytest.mark.parametrize("keep", [0.3, 0.6, 0.9])
def test_decode_truncated_png(keep: float) -> None:
    data = encode_png(np.random.default_rng(0).integers(0, 255, (64, 64, 3), dtype=np.uint8))
    with pytest.raises(InvalidInput, match="not a decodable image"):
        decode_image(data[: int(len(data) * keep)], LIMITS)


def test_decode_pixel_limit() -> None:
    data = encode_png(np.zeros((20, 30, 3), np.uint8))
    exact = DecodeLimits(max_pdf_pages=1, pdf_render_scale=1.0, max_image_pixels=600)
    assert decode_image(data, exact).shape == (20, 30, 3)
    under = DecodeLimits(max_pdf_pages=1, pdf_render_scale=1.0, max_image_pixels=599)
    with pytest.raises(InvalidInput) as info:
        decode_image(data, under)
    message = info.value.message
    assert "30 x 20 = 600 pixels" in message
    assert "599" in message
    assert "input.max_image_pixels" in message


# --- a document's pages, as a request reads them ----------------------------------------------


def _raw_upload(body: bytes, content_type: str) -> Request:
    async def receive() -> dict[str, object]:
        return {"type": "http.request", "body": body, "more_body": False}

    headers = [(b"content-type", content_type.encode()), (b"content-length", b"%d" % len(body))]
    return Request({"type": "http", "method": "POST", "headers": headers}, receive)


def test_an_empty_document_is_refused_as_it_is_read() -> None:
    for content_type in ("image/png", "application/pdf"):
        with pytest.raises(InvalidInput, match="empty file"):
            asyncio.run(read_document(_raw_upload(b"", content_type)))
    assert asyncio.run(read_document(_raw_upload(b"%PDF-1.4", "image/png")))[1] == "pdf"


def test_pages_of_an_image_and_a_pdf() -> None:
    pages = read_pages(encode_png(_pattern()), "image", LIMITS)
    assert len(pages) == 1
    np.testing.assert_array_equal(pages[0], _pattern())
    pdf = _pil_pdf([Image.new("RGB", (50, 40), RED_RGB)])
    pages = read_pages(pdf, "pdf", LIMITS)
    assert [p.shape for p in pages] == [(80, 100, 3)]


# --- PDF pages --------------------------------------------------------------------------------


def test_render_two_pages_shapes_at_scale() -> None:
    pdf = _pil_pdf([Image.new("RGB", (144, 72), RED_RGB), Image.new("RGB", (100, 200), "white")])
    pages = read_pages(pdf, "pdf", LIMITS)
    assert len(pages) == 2
    assert pages[0].shape == (144, 288, 3)  # 144 x 72 pt at scale 2 = 288 x 144 px
    assert pages[1].shape == (400, 200, 3)
    for page in pages:
        assert page.dtype == np.uint8
        assert page.flags.c_contiguous


def test_render_scale_is_applied() -> None:
    pdf = _pil_pdf([Image.new("RGB", (144, 72), RED_RGB)])
    one = DecodeLimits(max_pdf_pages=1, pdf_render_scale=1.0, max_image_pixels=10**8)
    three = DecodeLimits(max_pdf_pages=1, pdf_render_scale=3.0, max_image_pixels=10**8)
    assert read_pages(pdf, "pdf", one)[0].shape == (72, 144, 3)
    assert read_pages(pdf, "pdf", three)[0].shape == (216, 432, 3)


def test_render_red_page_is_bgr() -> None:
    pages = read_pages(_pil_pdf([Image.new("RGB", (144, 72), RED_RGB)]), "pdf", LIMITS)
    page = pages[0].astype(int)
    # Resampling the embedded image may shift a channel by a level or two.
    assert np.abs(page[72, 144] - RED_BGR).max() <= 2
    assert np.abs(page[10, 10] - RED_BGR).max() <= 2
    assert (np.abs(page - RED_BGR).max(axis=2) <= 2).mean() > 0.99


def test_render_preserves_layout() -> None:
    # Orientation check: the top-left quadrant of the page is blue, bottom-left red.
    pdf = make_pdf([_pattern(72, 144)], dpi=72.0)
    page = read_pages(pdf, "pdf", LIMITS)[0]
    assert page.shape == (144, 288, 3)
    assert np.abs(page[30, 60].astype(int) - [255, 0, 0]).max() <= 2
    assert np.abs(page[30, 230].astype(int) - [0, 255, 0]).max() <= 2
    assert np.abs(page[110, 60].astype(int) - [0, 0, 255]).max() <= 2


def test_render_exact_page_limit_ok() -> None:
    pdf = make_pdf([np.full((10, 10, 3), 255, np.uint8)] * 3, dpi=72.0)
    limits = DecodeLimits(max_pdf_pages=3, pdf_render_scale=1.0, max_image_pixels=10**6)
    assert len(read_pages(pdf, "pdf", limits)) == 3


def test_render_too_many_pages() -> None:
    pdf = make_pdf([np.full((10, 10, 3), 255, np.uint8)] * 4, dpi=72.0)
    limits = DecodeLimits(max_pdf_pages=3, pdf_render_scale=1.0, max_image_pixels=10**6)
    with pytest.raises(InvalidInput) as info:
        read_pages(pdf, "pdf", limits)
    message = info.value.message
    assert "4 pages" in message
    assert "at most 3" in message
    assert "input.max_pdf_pages" in message


def test_render_page_pixel_limit() -> None:
    pdf = _pil_pdf([Image.new("RGB", (144, 72), RED_RGB)])
    limits = DecodeLimits(max_pdf_pages=1, pdf_render_scale=2.0, max_image_pixels=288 * 144 - 1)
    with pytest.raises(InvalidInput, match=r"288 x 144 = 41472 pixels; the limit is 41471"):
        read_pages(pdf, "pdf", limits)


@pytest.mark.parametrize("data", [b"garbage", b"%PDF-1.4\ngarbage", b"\x00" * 64])
def test_render_garbage_pdf(data: bytes) -> None:
    with pytest.raises(InvalidInput, match="not a readable PDF"):
        read_pages(data, "pdf", LIMITS)


def test_render_truncated_pdf() -> None:
    pdf = make_pdf([_pattern(72, 144)] * 2, dpi=72.0)
    with pytest.raises(InvalidInput):
        read_pages(pdf[: len(pdf) // 3], "pdf", LIMITS)


def _hdr(height: int, width: int) -> bytes:
    """A Radiance HDR, a format OpenCV decodes and PIL cannot size: run-length coded zeros, so a
    small file stands for a large float image."""
    import cv2

    ok, buf = cv2.imencode(".hdr", np.zeros((height, width, 3), np.float32))
    assert ok
    return buf.tobytes()


def test_an_image_pil_cannot_size_is_refused_before_opencv_sees_it(monkeypatch) -> None:
    # OpenCV decodes the whole image before its size is known (a 1 MB HDR made 16 Mpx of float),
    # so what cannot be sized from its header is never handed to it (issue 26).
    data = _hdr(400, 500)
    assert len(data) < 500 * 400  # far smaller than its pixels

    def imdecode(*args: object) -> None:
        raise AssertionError("OpenCV decoded an image whose size was never checked")

    monkeypatch.setattr("serving.decode.readers.cv2.imdecode", imdecode)
    for decode in (decode_image, read_image_pages):
        with pytest.raises(InvalidInput, match=r"input\.max_image_pixels") as info:
            decode(data, LIMITS)
        assert info.value.http_status == 422


def read_image_pages(data: bytes, limits: DecodeLimits) -> object:
    return read_pages(data, "image", limits)


def _gif(frames: int) -> bytes:
    pages = [Image.new("RGB", (20, 10), (10 * i % 256, 0, 0)) for i in range(frames)]
    return _pil_bytes(pages[0], "GIF", save_all=True, append_images=pages[1:])


def test_frames_over_the_document_cap_are_refused_before_decoding() -> None:
    limits = DecodeLimits(
        max_pdf_pages=100, pdf_render_scale=1.0, max_image_pixels=10**6, max_frames_per_document=4
    )
    assert len(read_pages(_gif(4), "image", limits)) == 4
    with pytest.raises(InvalidInput, match=r"5 frames.*input\.max_frames_per_document") as info:
        read_pages(_gif(5), "image", limits)
    assert info.value.http_status == 422
