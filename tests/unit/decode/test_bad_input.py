"""Bad and unusual input for serving/decode/readers.py: each class is decoded right or refused
with 422.

Every input is built here (PIL, numpy, pypdfium2); no files are committed.
"""

from __future__ import annotations

import io
import struct
import time
import zlib
from pathlib import Path

import numpy as np
import pypdfium2 as pdfium
import pytest
from PIL import Image

from pipelines.det_preprocess import preprocess_det
from pipelines.ocr import run_page
from pipelines.rec_postprocess import build_charset
from pipelines.types import ClsParams, DetParams, PageResult, RecParams
from serving.decode.documents import count_pages, decode_page
from serving.decode.readers import DecodeLimits, decode_image, frames_type
from serving.errors import InvalidInput
from serving.http.paddlex_api import infer_result
from serving.request_options import OcrOptions
from serving.service.ocr import PageOutput
from tests.pages import read_pages

LIMITS = DecodeLimits(max_pdf_pages=10, pdf_render_scale=2.0, max_image_pixels=178_956_970)


def _pil_bytes(img: Image.Image, fmt: str, **kwargs: object) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format=fmt, **kwargs)
    return buf.getvalue()


def _noise(height: int = 64, width: int = 64) -> Image.Image:
    rng = np.random.default_rng(0)
    return Image.fromarray(rng.integers(0, 255, (height, width, 3), dtype=np.uint8))


def _refused(data: bytes, kind: str = "image", limits: DecodeLimits = LIMITS) -> str:
    with pytest.raises(InvalidInput) as info:
        read_pages(data, kind, limits)  # type: ignore[arg-type]
    assert info.value.http_status == 422
    return info.value.message


def _png_chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def _png_header_only(width: int, height: int, idat: bytes = b"") -> bytes:
    """A PNG with a valid IHDR of any size (PIL cannot write 0-pixel sides)."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    chunks = _png_chunk(b"IHDR", ihdr)
    if idat:
        chunks += _png_chunk(b"IDAT", idat)
    return b"\x89PNG\r\n\x1a\n" + chunks + _png_chunk(b"IEND", b"")


# --- truncated and corrupt files ------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["PNG", "JPEG", "TIFF"])
@pytest.mark.parametrize("keep", [0.3, 0.6, 0.95])
def test_truncated_image(fmt: str, keep: float) -> None:
    data = _pil_bytes(_noise(), fmt)
    message = _refused(data[: int(len(data) * keep)])
    assert message.startswith("Invalid input file")


def test_truncated_jpeg_says_so() -> None:
    data = _pil_bytes(_noise(), "JPEG")
    assert "truncated" in _refused(data[: len(data) // 2])


def test_corrupt_png_data() -> None:
    data = bytearray(_pil_bytes(_noise(), "PNG"))
    for i in range(len(data) // 3, len(data) // 3 + 200, 7):
        data[i] ^= 0x55
    assert _refused(bytes(data)).startswith("Invalid input file")


def test_corrupt_jpeg_frame_header() -> None:
    data = _pil_bytes(_noise(), "JPEG")
    sof = data.index(b"\xff\xc0")
    broken = data[:sof] + b"\xff\x00" + data[sof + 2 :]
    assert _refused(broken).startswith("Invalid input file")


def test_corrupt_jpeg_scan_data_decodes_as_libjpeg_recovers_it() -> None:
    # Damage inside the entropy-coded data is what libjpeg (and browsers, and PaddleX) recover
    # from with a warning: the page decodes at its size, with garbled pixels.
    data = bytearray(_pil_bytes(_noise(), "JPEG"))
    for i in range(len(data) // 2, len(data) // 2 + 200, 7):
        data[i] ^= 0x55
    (page,) = read_pages(bytes(data), "image", LIMITS)
    assert page.shape == (64, 64, 3)


def test_corrupt_tiff_header() -> None:
    data = bytearray(_pil_bytes(_noise(), "TIFF"))
    data[4:8] = b"\xff\xff\xff\x7f"  # first IFD offset far past the end
    assert _refused(bytes(data)).startswith("Invalid input file")


def test_truncated_pdf() -> None:
    doc = pdfium.PdfDocument.new()
    for _ in range(3):
        doc.new_page(200, 200)
    buf = io.BytesIO()
    doc.save(buf)
    data = buf.getvalue()
    assert "not a readable PDF" in _refused(data[: len(data) // 3], "pdf")


@pytest.mark.parametrize("data", [b"%PDF-1.7\n" + bytes(range(256)) * 8, b"%PDF-"])
def test_corrupt_pdf(data: bytes) -> None:
    assert "not a readable PDF" in _refused(data, "pdf")


@pytest.mark.parametrize(
    "data",
    [
        b"hello, this is text",
        bytes(np.random.default_rng(1).integers(0, 256, 4096, dtype=np.uint8)),
        b"\x00" * 100,
        b"\x89PNG\r\n\x1a\n" + b"\x00" * 40,
        b"GIF89a" + b"\x00" * 10,
    ],
)
def test_bytes_that_are_no_image(data: bytes) -> None:
    assert _refused(data).startswith("Invalid input file")


# --- tiny, empty and extreme sizes ----------------------------------------------------------


@pytest.mark.parametrize(("width", "height"), [(0, 10), (10, 0), (0, 0)])
def test_zero_pixel_side(width: int, height: int) -> None:
    assert _refused(_png_header_only(width, height)).startswith("Invalid input file")


def _fake_det(batch: np.ndarray) -> np.ndarray:
    return np.zeros((1, 1, *batch.shape[2:]), np.float32)


def _fake_rec(batch: np.ndarray) -> np.ndarray:
    steps = max(batch.shape[3] // 8, 1)
    probs = np.zeros((batch.shape[0], steps, 3), np.float32)
    probs[:, :, 1] = 1.0  # "a" at every step: "a" after CTC
    return probs


def _ocr(image: np.ndarray, det: object = _fake_det) -> list[str]:
    result = run_page(
        image,
        det=det,  # type: ignore[arg-type]
        rec=_fake_rec,
        cls=None,
        det_params=DetParams(),
        rec_params=RecParams(),
        cls_params=ClsParams(),
        charset=build_charset(["a"]),
    )
    return [line.text for line in result.lines]


def test_one_pixel_image_decodes_and_ocrs_to_nothing() -> None:
    (page,) = read_pages(_pil_bytes(Image.new("RGB", (1, 1), (10, 20, 30)), "PNG"), "image", LIMITS)
    assert page.shape == (1, 1, 3)
    assert page[0, 0].tolist() == [30, 20, 10]
    det_input = preprocess_det(page, DetParams())
    assert det_input.tensor.shape == (3, 64, 64)  # padded to 32 x 32, then the min side to 64
    assert _ocr(page) == []


@pytest.mark.parametrize(("width", "height"), [(20000, 20), (20, 20000), (1, 5000), (5000, 1)])
def test_extreme_aspect_ratio(width: int, height: int) -> None:
    data = _pil_bytes(Image.new("RGB", (width, height), "white"), "PNG")
    (page,) = read_pages(data, "image", LIMITS)
    assert page.shape == (height, width, 3)
    det_input = preprocess_det(page, DetParams())
    _, det_h, det_w = det_input.tensor.shape
    assert max(det_h, det_w) <= DetParams().max_side_limit
    assert det_h % 32 == 0
    assert det_w % 32 == 0
    assert min(det_h, det_w) >= 32
    assert _ocr(page) == []

    def det_everywhere(batch: np.ndarray) -> np.ndarray:
        return np.ones((1, 1, *batch.shape[2:]), np.float32)

    # Text found over the whole page: cropping and recognition of one extreme line survive too.
    assert all(text == "a" for text in _ocr(page, det_everywhere))


# --- colour modes, bit depths and orientation -----------------------------------------------


def test_cmyk_jpeg_is_bgr() -> None:
    data = _pil_bytes(Image.new("CMYK", (8, 6), (0, 255, 255, 0)), "JPEG", quality=100)
    (page,) = read_pages(data, "image", LIMITS)
    assert page.shape == (6, 8, 3)
    assert page.dtype == np.uint8
    assert np.abs(page[3, 4].astype(int) - [0, 0, 255]).max() <= 4  # red


def test_sixteen_bit_png_is_scaled_to_uint8() -> None:
    gray = np.full((6, 8), 0x8000, np.uint16)
    gray[0, 0] = 0xFFFF
    img = Image.fromarray(gray)
    data = _pil_bytes(img, "PNG")
    assert img.mode == "I;16"
    assert data[24] == 16  # IHDR bit depth
    (page,) = read_pages(data, "image", LIMITS)
    assert page.dtype == np.uint8
    assert page.shape == (6, 8, 3)
    assert page[0, 0].tolist() == [255, 255, 255]
    assert page[1, 1].tolist() == [128, 128, 128]


def test_rgba_png_drops_alpha() -> None:
    img = Image.new("RGBA", (4, 3), (0, 255, 0, 0))
    (page,) = read_pages(_pil_bytes(img, "PNG"), "image", LIMITS)
    assert page.shape == (3, 4, 3)
    assert page[1, 1].tolist() == [0, 255, 0]


def test_palette_png() -> None:
    img = Image.new("P", (4, 3))
    img.putpalette([255, 0, 0, 0, 0, 255] + [0] * 762)
    img.putpixel((2, 1), 1)
    (page,) = read_pages(_pil_bytes(img, "PNG"), "image", LIMITS)
    assert page[0, 0].tolist() == [0, 0, 255]  # red
    assert page[1, 2].tolist() == [255, 0, 0]  # blue


def test_grayscale_png() -> None:
    gray = np.arange(12, dtype=np.uint8).reshape(3, 4) * 20
    (page,) = read_pages(_pil_bytes(Image.fromarray(gray, mode="L"), "PNG"), "image", LIMITS)
    assert page.shape == (3, 4, 3)
    for channel in range(3):
        np.testing.assert_array_equal(page[:, :, channel], gray)


def test_exif_orientation_is_applied() -> None:
    # 40 wide x 20 high: left half red, right half blue. Orientation 6 = rotate 90 clockwise
    # to display, so the page comes out 20 wide x 40 high, red on top.
    arr = np.zeros((20, 40, 3), np.uint8)
    arr[:, :20] = (255, 0, 0)
    arr[:, 20:] = (0, 0, 255)
    exif = Image.Exif()
    exif[0x0112] = 6
    data = _pil_bytes(Image.fromarray(arr), "JPEG", quality=95, exif=exif.tobytes())
    (page,) = read_pages(data, "image", LIMITS)
    assert page.shape == (40, 20, 3)
    assert np.abs(page[5, 10].astype(int) - [0, 0, 255]).max() < 40  # red (BGR) on top
    assert np.abs(page[35, 10].astype(int) - [255, 0, 0]).max() < 40  # blue below


# --- multi-frame images ---------------------------------------------------------------------


def _frames(count: int, size: tuple[int, int] = (6, 4)) -> list[Image.Image]:
    colours = [(255, 0, 0), (0, 255, 0), (0, 0, 255), (255, 255, 0), (0, 255, 255)]
    return [Image.new("RGB", size, colours[i % len(colours)]) for i in range(count)]


def _multi(fmt: str, frames: list[Image.Image]) -> bytes:
    return _pil_bytes(frames[0], fmt, save_all=True, append_images=frames[1:])


@pytest.mark.parametrize("fmt", ["TIFF", "GIF"])
def test_multi_frame_one_page_per_frame(fmt: str) -> None:
    data = _multi(fmt, _frames(3))
    pages = read_pages(data, "image", LIMITS)
    assert len(pages) == 3
    expected = [[0, 0, 255], [0, 255, 0], [255, 0, 0]]  # red, green, blue as BGR
    for page, bgr in zip(pages, expected, strict=True):
        assert page.shape == (4, 6, 3)
        assert page.dtype == np.uint8
        assert page.flags.c_contiguous
        assert page[2, 3].tolist() == bgr
    assert frames_type(data) == fmt.lower()
    # Jobs read one image page: the first frame.
    assert decode_image(data, LIMITS)[2, 3].tolist() == [0, 0, 255]


@pytest.mark.parametrize("fmt", ["TIFF", "GIF"])
def test_multi_frame_over_page_cap(fmt: str) -> None:
    data = _multi(fmt, _frames(4))
    limits = DecodeLimits(max_pdf_pages=3, pdf_render_scale=1.0, max_image_pixels=10**6)
    message = _refused(data, limits=limits)
    assert "4 frames" in message
    assert "at most 3" in message
    assert "input.max_pdf_pages" in message
    assert "POST /v1/jobs" in message  # the route that takes it
    assert len(read_pages(data, "image", LIMITS)) == 4


def test_mpo_jpeg_is_one_page_with_its_orientation() -> None:
    # Phone photos carry previews as further MPO frames: the picture is the first image only.
    exif = Image.Exif()
    exif[0x0112] = 6
    first, preview = Image.new("RGB", (40, 20), (255, 0, 0)), Image.new("RGB", (8, 4), "white")
    data = _pil_bytes(first, "MPO", save_all=True, append_images=[preview], exif=exif.tobytes())
    with Image.open(io.BytesIO(data)) as img:
        assert (img.format, getattr(img, "n_frames", 1)) == ("MPO", 2)
    (page,) = read_pages(data, "image", LIMITS)
    assert page.shape == (40, 20, 3)
    assert np.abs(page[20, 10].astype(int) - [0, 0, 255]).max() < 40


def test_multi_frame_data_info_for_ocr() -> None:
    pages = [PageOutput(PageResult(width=6, height=4)), PageOutput(PageResult(width=8, height=5))]
    options = OcrOptions(det=DetParams(), rec=RecParams(), cls=None)
    result = infer_result(pages, "image", options, {}, frames_type="tiff")
    assert result["dataInfo"] == {
        "numPages": 2,
        "pages": [{"width": 6, "height": 4}, {"width": 8, "height": 5}],
        "type": "tiff",
    }
    assert len(result["ocrResults"]) == 2
    (single,) = pages[:1]
    assert infer_result([single], "image", options, {})["dataInfo"] == {
        "width": 6,
        "height": 4,
        "type": "image",
    }


def test_multi_frame_tiff_frame_over_pixel_cap() -> None:
    frames = [Image.new("RGB", (10, 10)), Image.new("RGB", (100, 100))]
    limits = DecodeLimits(max_pdf_pages=10, pdf_render_scale=1.0, max_image_pixels=1000)
    assert "input.max_image_pixels" in _refused(_multi("TIFF", frames), limits=limits)


def test_single_frame_gif() -> None:
    (page,) = read_pages(_pil_bytes(Image.new("RGB", (5, 3), (255, 0, 0)), "GIF"), "image", LIMITS)
    assert page.shape == (3, 5, 3)
    assert page[1, 1].tolist() == [0, 0, 255]


# --- decompression bombs and page bombs -----------------------------------------------------


def _zeros_png(width: int, height: int) -> bytes:
    """A valid PNG of black RGB pixels, compressed row by row without holding the image."""
    row = b"\x00" * (1 + 3 * width)
    packer = zlib.compressobj(9)
    idat = b"".join(packer.compress(row) for _ in range(height)) + packer.flush()
    return _png_header_only(width, height, idat)


def test_decompression_bomb_refused_before_decode() -> None:
    data = _zeros_png(30000, 30000)
    assert len(data) < 4_000_000  # 2.7 GB of pixels in a few MB
    started = time.monotonic()
    message = _refused(data)
    assert time.monotonic() - started < 1.0
    assert "30000 x 30000 = 900000000 pixels" in message
    assert "input.max_image_pixels" in message


@pytest.mark.parametrize("fmt", ["JPEG", "TIFF", "GIF"])
def test_pixel_cap_from_header(fmt: str) -> None:
    data = _pil_bytes(Image.new("RGB", (300, 200), "white"), fmt)
    limits = DecodeLimits(max_pdf_pages=10, pdf_render_scale=1.0, max_image_pixels=59_999)
    assert "300 x 200 = 60000 pixels" in _refused(data, limits=limits)


def _pdf_with_pages(count: int) -> bytes:
    doc = pdfium.PdfDocument.new()
    for _ in range(count):
        doc.new_page(100, 100)
    buf = io.BytesIO()
    doc.save(buf)
    return buf.getvalue()


def test_pdf_page_tree_counting_more_pages_than_it_holds() -> None:
    # Found by test_properties_inputs.py: pdfium counts 3 pages, then fails to load the third,
    # which was a PdfiumError (500) on /v1/ocr, /ocr and in jobs.
    data = _pdf_with_pages(2).replace(b"/Count 2", b"/Count 3")
    assert "page 3 of the PDF cannot be read" in _refused(data, "pdf")
    assert count_pages(data, "pdf") == 3
    with pytest.raises(InvalidInput, match="page 3 of the PDF"):
        decode_page(data, "pdf", 2, LIMITS)


def test_ten_thousand_page_pdf_refused_before_rendering() -> None:
    data = _pdf_with_pages(10_000)
    started = time.monotonic()
    message = _refused(data, "pdf")
    assert time.monotonic() - started < 2.0
    assert "10000 pages" in message
    assert "input.max_pdf_pages" in message
    assert message.endswith("send it as a batch job (POST /v1/jobs), which takes long documents")


def _encrypted_pdf() -> bytes:
    """A one-page PDF with a standard security handler whose user password is not empty."""
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 100 100] >>",
        b"<< /Filter /Standard /V 1 /R 2 /O <"
        + b"11" * 32
        + b"> /U <"
        + b"22" * 32
        + b"> /P -4 >>",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    for offset in offsets:
        out += b"%010d 00000 n \n" % offset
    ident = b"ab" * 16
    out += b"trailer\n<< /Size %d /Root 1 0 R /Encrypt 4 0 R /ID [<%s> <%s>] >>\n" % (
        len(objects) + 1,
        ident,
        ident,
    )
    out += b"startxref\n%d\n%%%%EOF\n" % xref
    return bytes(out)


def test_encrypted_pdf() -> None:
    message = _refused(_encrypted_pdf(), "pdf")
    assert "encrypted PDF" in message
    with pytest.raises(InvalidInput, match="encrypted PDF"):
        read_pages(_encrypted_pdf(), "pdf", LIMITS)


@pytest.mark.parametrize(
    "failing", [_encrypted_pdf(), b"%PDF-1.7\n" + bytes(range(256)) * 8], ids=["encrypted", "bad"]
)
def test_pdf_without_pages_whatever_failed_before(failing: bytes, tmp_path: Path) -> None:
    # pypdfium2 takes a PDF that loads with no pages for one that failed to load, and quotes
    # pdfium's last error, which only failures set: the answer was whatever failed before.
    empty = _pdf_with_pages(0)
    path = tmp_path / "empty.pdf"
    path.write_bytes(empty)
    for _ in range(2):
        _refused(failing, "pdf")
        assert _refused(empty, "pdf") == "Invalid input file: the PDF has no pages"
        _refused(failing, "pdf")
        with pytest.raises(InvalidInput, match=r"^Invalid input file: the PDF has no pages$"):
            count_pages(path, "pdf")
        _refused(failing, "pdf")
        with pytest.raises(InvalidInput, match=r"^Invalid input file: the PDF has no pages$"):
            decode_page(empty, "pdf", 0, LIMITS)
