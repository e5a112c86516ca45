"""Decoding request bodies into BGR pages: images with OpenCV, PDFs with pypdfium2."""

from __future__ import annotations

import io
import math
import os
import struct
import threading
import warnings
from dataclasses import dataclass
from typing import Literal

import cv2
import numpy as np
import pypdfium2 as pdfium
from PIL import Image, ImageSequence, TiffImagePlugin

from serving.errors import InvalidInput

FileKind = Literal["pdf", "image"]

# pdfium is not thread-safe; each CPU worker is a process, but tests call this from threads too.
PDFIUM_LOCK = threading.Lock()

# Our own cap, input.max_image_pixels, is checked from the image header before any decode (see
# `_probe`); PIL's global one would warn (an error under pytest) or refuse with its own figure.
Image.MAX_IMAGE_PIXELS = None

# Formats whose frames are pages. Not MPO: phone cameras store a JPEG's previews and depth maps as
# further frames, and its first image is the picture (decoded by OpenCV, EXIF orientation applied).
_FRAME_FORMATS = frozenset(("TIFF", "GIF", "WEBP"))

# What PIL raises on malformed headers: its own OSError subclasses, and a few plain errors from
# the plugins' parsing of bad bytes.
_PIL_ERRORS = (OSError, ValueError, SyntaxError, EOFError, struct.error, IndexError, TypeError)


@dataclass(frozen=True, slots=True, kw_only=True)
class DecodeLimits:
    """What one document may hold."""

    max_pdf_pages: int
    pdf_render_scale: float
    max_image_pixels: int
    max_frames_per_document: int = 500
    """Frames of one multi-frame image (`input.max_frames_per_document`)."""
    max_page_side_px: int = 0
    """Pages are decoded with their longer side at most this (PDFs rendered at a lower scale,
    images downscaled right after decoding); 0 = as sent. `max_image_pixels` is checked on the
    size as sent."""


def frames_type(data: bytes) -> str:
    """How `/ocr`'s dataInfo names a multi-frame image: "gif", "webp" or "tiff"."""
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "webp"
    return "tiff"


TO_JOBS = ": send it as a batch job (POST /v1/jobs), which takes long documents"
"""Appended to a request's page-cap refusal: the route that takes the document."""


def no_such_page(kind: FileKind, count: int, index: int) -> InvalidInput:
    """A page asked for that the document does not have, counted from 0 as the API counts
    (`/v1/render?page=`, the JSON's `page`): 2 pages are pages 0 and 1."""
    have = "page 0 only" if count == 1 else f"pages 0 to {count - 1}"
    what = "PDF" if kind == "pdf" else "image"
    return InvalidInput(f"There is no page {index}: the {what} has {have} (counted from 0)")


def sniff_kind(data: bytes) -> FileKind | None:
    """Guess the file kind from magic bytes; None when it is neither a PDF nor a known image."""
    head = data[:16]
    if head.startswith(b"%PDF-") or b"%PDF-" in data[:1024]:
        return "pdf"
    signatures = (
        b"\x89PNG\r\n\x1a\n",
        b"\xff\xd8\xff",
        b"GIF87a",
        b"GIF89a",
        b"BM",
        b"II*\x00",
        b"MM\x00*",
    )
    if any(head.startswith(sig) for sig in signatures):
        return "image"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image"
    return None


@dataclass(frozen=True, slots=True)
class _Header:
    format: str
    """PIL's format name: "PNG", "JPEG", "TIFF", "GIF", ..."""
    width: int
    height: int
    frames: int


def _probe(data: bytes) -> _Header:
    """The image's format, size and frame count from its header, without decoding pixels.

    Raises:
        InvalidInput: PIL cannot read the header. OpenCV might decode the image, but only whole
            (a Radiance HDR of 1 MB decoded 16 Mpx as float before its size could be checked;
            OpenCV's own cap is 2^30 pixels), so what cannot be sized is not decoded (issue 26).
    """
    try:
        # PIL warns about damaged metadata (EXIF) in untrusted files; only its errors matter here.
        with warnings.catch_warnings(action="ignore"), Image.open(io.BytesIO(data)) as img:
            frames = int(getattr(img, "n_frames", 1))
            return _Header(
                format=img.format or "", width=img.width, height=img.height, frames=frames
            )
    except _PIL_ERRORS as err:
        raise InvalidInput(
            "Invalid input file: not a decodable image, or one whose size cannot be read from "
            "its header to check it against input.max_image_pixels before decoding; send PNG, "
            "JPEG, BMP, TIFF, GIF or WebP"
        ) from err


def _check_frames(header: _Header, limits: DecodeLimits) -> None:
    if header.frames > limits.max_frames_per_document:
        raise InvalidInput(
            f"The image has {header.frames} frames; this server reads at most "
            f"{limits.max_frames_per_document} of one document (input.max_frames_per_document)"
        )


def _by_frames(header: _Header) -> bool:
    """Whether the image is read frame by frame with PIL (GIF, multi-frame TIFF and WebP)."""
    return header.format == "GIF" or (header.frames > 1 and header.format in _FRAME_FORMATS)


def image_page_count(data: bytes, limits: DecodeLimits | None = None) -> int:
    """Pages of an image: one per frame when read by frames (`_by_frames`), else 1.

    Raises:
        InvalidInput: the header does not read, or it has more frames than `limits` allow.
    """
    header = _probe(data)
    if limits is not None:
        _check_frames(header, limits)
    return header.frames if _by_frames(header) else 1


def image_page_sizes(
    data: bytes, limits: DecodeLimits, *, only: int | None = None
) -> list[tuple[int, int]]:
    """(width, height) of each page `decode_image_page` decodes, or of page `only`, read from
    headers only. Frames count against `max_pdf_pages` unless one page is asked for (jobs).

    Raises:
        InvalidInput: the image does not decode, no such page, a frame is over the pixel cap, or
            there are more frames than `max_pdf_pages`.
    """
    header = _probe(data)
    _check_pixels(header.height, header.width, limits)
    _check_frames(header, limits)
    count = header.frames if _by_frames(header) else 1
    if only is not None and not 0 <= only < count:
        raise no_such_page("image", count, only)
    if count == 1:
        return [(header.width, header.height)]
    if only is None and count > limits.max_pdf_pages:
        raise InvalidInput(
            f"The image has {count} frames; this server accepts at most "
            f"{limits.max_pdf_pages} pages per request (input.max_pdf_pages){TO_JOBS}"
        )
    sizes = []
    try:
        with warnings.catch_warnings(action="ignore"), Image.open(io.BytesIO(data)) as img:
            for index in range(count) if only is None else (only,):
                img.seek(index)  # reads the frame's header, not its pixels
                _check_pixels(img.height, img.width, limits)
                sizes.append((img.width, img.height))
    except _PIL_ERRORS as err:
        raise InvalidInput("Invalid input file: not a decodable image") from err
    return sizes


def pdf_page_size(doc: pdfium.PdfDocument, index: int, limits: DecodeLimits) -> tuple[int, int]:
    """(width, height) page `index` renders to at `pdf_render_scale`, from the page tree, without
    rendering; the caller holds `PDFIUM_LOCK`.

    Raises:
        InvalidInput: the page cannot be read, or it is over the pixel cap.
    """
    try:
        width, height = doc.get_page_size(index)
    except pdfium.PdfiumError as err:
        raise InvalidInput(
            f"Invalid input file: page {index + 1} of the PDF cannot be read ({err})"
        ) from err
    full = limits.pdf_render_scale
    _check_pixels(math.ceil(height * full), math.ceil(width * full), limits)
    scale = render_scale(width, height, limits)
    return (math.ceil(width * scale), math.ceil(height * scale))  # as pypdfium2's `render` sizes


def render_scale(width_pt: float, height_pt: float, limits: DecodeLimits) -> float:
    """The scale a page of `width_pt` x `height_pt` renders at: `pdf_render_scale`, lowered so
    that its longer side is at most `max_page_side_px` (pages that fit render as before)."""
    scale = limits.pdf_render_scale
    cap, longest = limits.max_page_side_px, max(width_pt, height_pt)
    if cap <= 0 or math.ceil(longest * scale) <= cap:
        return scale
    scale = cap / longest
    while math.ceil(longest * scale) > cap:  # float rounding may land one pixel over
        scale = math.nextafter(scale, 0.0)
    return scale


def fit_side(width: int, height: int, max_side_px: int) -> tuple[int, int]:
    """(width, height) scaled so that the longer side is at most `max_side_px` (0 = no cap)."""
    longest = max(width, height)
    if max_side_px <= 0 or longest <= max_side_px:
        return width, height
    ratio = max_side_px / longest
    return max(1, min(max_side_px, round(width * ratio))), max(
        1, min(max_side_px, round(height * ratio))
    )


def fit_page(image: np.ndarray, limits: DecodeLimits) -> np.ndarray:
    """A decoded image downscaled (area interpolation) to `max_page_side_px`, or as it is."""
    height, width = image.shape[:2]
    size = fit_side(width, height, limits.max_page_side_px)
    if size == (width, height):
        return image
    return np.ascontiguousarray(cv2.resize(image, size, interpolation=cv2.INTER_AREA))


def decode_image_page(data: bytes, index: int, limits: DecodeLimits) -> np.ndarray:
    """Page `index` of an image, decoding that frame only: a frame of a multi-frame TIFF or an
    animated image, else the image itself.

    `max_pdf_pages` does not cap it here: a request's pages are counted against it when they are
    sized (`image_page_sizes`), a batch job's are not.

    Raises:
        InvalidInput: no such page, the bytes do not decode, or the pixel cap is exceeded.
    """
    header = _probe(data)
    count = header.frames if _by_frames(header) else 1
    if not 0 <= index < count:
        raise no_such_page("image", count, index)
    if _by_frames(header):
        _check_pixels(header.height, header.width, limits)
        return _decode_frame(data, header, limits, index)
    return decode_image(data, limits)


def decode_image(data: bytes, limits: DecodeLimits) -> np.ndarray:
    """Decode one image (its first frame) to BGR uint8, alpha dropped.

    Single-frame images are decoded as PaddleX does, with `cv2.imdecode(IMREAD_COLOR)`, which
    also applies the EXIF orientation. The pixel cap is checked from the header first.
    """
    header = _probe(data)
    _check_pixels(header.height, header.width, limits)
    if _by_frames(header):
        return _decode_frame(data, header, limits, 0)
    return _decode_with_cv2(data, header, limits)


def _decode_with_cv2(data: bytes, header: _Header, limits: DecodeLimits) -> np.ndarray:
    if header.format in ("JPEG", "MPO") and _jpeg_truncated(data):
        # libjpeg fills the missing rows with grey and OpenCV returns the image regardless.
        raise InvalidInput("Invalid input file: the JPEG is truncated")
    buf = np.frombuffer(data, dtype=np.uint8)
    image = cv2.imdecode(buf, cv2.IMREAD_COLOR) if buf.size else None  # empty: cv2.error
    if image is None or image.size == 0:
        raise InvalidInput("Invalid input file: not a decodable image")
    _check_pixels(image.shape[0], image.shape[1], limits)
    return np.ascontiguousarray(image)


def _jpeg_truncated(data: bytes) -> bool:
    # 0xFF is byte-stuffed in entropy-coded data, so the last end-of-image marker must follow the
    # last start-of-scan marker (an EXIF thumbnail's own markers come before both).
    return data.rfind(b"\xff\xd9") < data.rfind(b"\xff\xda")


def _decode_frame(data: bytes, header: _Header, limits: DecodeLimits, index: int) -> np.ndarray:
    """Frame `index` of an image read by frames, as BGR."""
    _check_frames(header, limits)
    try:
        with warnings.catch_warnings(action="ignore"), Image.open(io.BytesIO(data)) as img:
            img.seek(index)
            _check_pixels(img.height, img.width, limits)
            rgb = np.asarray(img.convert("RGB"))
            return np.ascontiguousarray(rgb[:, :, ::-1])
    except _PIL_ERRORS as err:
        raise InvalidInput("Invalid input file: not a decodable image") from err


def is_animated(data: bytes) -> bool:
    """Whether a multi-frame image is a GIF or a WebP, whose frames decode only in order: frame i
    is drawn over frame i-1, so reading it alone decodes frames 0..i (TIFF pages stand alone)."""
    return frames_type(data) != "tiff"


def frames_to_tiff(data: bytes, path: str, limits: DecodeLimits) -> int:
    """Decode every frame of a multi-frame image in one pass and write them, as `decode_page`
    decodes them (scaled to `max_page_side_px`, as `fit_page` scales them), to a multi-page TIFF
    at `path` (lossless): a job then decodes each page alone, and a huge logical screen is not
    stored at its full size for every frame. One frame is held at a time. Returns the number of
    frames.

    Raises:
        InvalidInput: the bytes do not decode, or a limit (pixels, frames) is exceeded.
    """
    header = _probe(data)
    _check_frames(header, limits)
    frames = 0
    try:
        with (
            warnings.catch_warnings(action="ignore"),
            Image.open(io.BytesIO(data)) as img,
            TiffImagePlugin.AppendingTiffWriter(path, new=True) as out,
        ):
            for frame in ImageSequence.Iterator(img):
                _check_pixels(frame.height, frame.width, limits)
                _fit_frame(frame.convert("RGB"), limits).save(
                    out, format="TIFF", compression="tiff_adobe_deflate"
                )
                out.newFrame()
                frames += 1
    except _PIL_ERRORS as err:
        raise InvalidInput("Invalid input file: not a decodable image") from err
    return frames


def _fit_frame(rgb: Image.Image, limits: DecodeLimits) -> Image.Image:
    """An RGB frame scaled as `fit_page` scales its BGR copy (area interpolation works on each
    channel alone, so the pixels are the same), or as it is."""
    size = fit_side(rgb.width, rgb.height, limits.max_page_side_px)
    if size == rgb.size:
        return rgb
    return Image.fromarray(cv2.resize(np.asarray(rgb), size, interpolation=cv2.INTER_AREA))


def open_pdf(source: bytes | str) -> pdfium.PdfDocument:
    """Open a PDF from bytes or a path; hold `PDFIUM_LOCK` while using it.

    Raises:
        InvalidInput: not a readable PDF, an encrypted one, or one with no pages.
    """
    # Not `pdfium.PdfDocument(source)`: pypdfium2 takes a PDF that loads with no pages for one
    # that failed to load and quotes pdfium's last error, which pdfium sets only on failure, so a
    # 0-page PDF was answered with whatever failed before in this process ("encrypted PDF", "Data
    # format error"), and the loaded document was never closed.
    data = source if isinstance(source, bytes) else None
    if data is not None:
        raw = pdfium.raw.FPDF_LoadMemDocument64(data, len(data), None)
    else:
        raw = pdfium.raw.FPDF_LoadDocument(os.fsencode(source), None)
    if not raw:
        raise _load_error(pdfium.raw.FPDF_GetLastError())  # set by this load, as it failed
    if pdfium.raw.FPDF_GetPageCount(raw) < 1:
        pdfium.raw.FPDF_CloseDocument(raw)
        raise InvalidInput("Invalid input file: the PDF has no pages")
    return _Pdf(raw, data)


class _Pdf(pdfium.PdfDocument):  # type: ignore[misc]  # pypdfium2 is untyped
    """A document loaded from its raw handle, holding the bytes pdfium reads as long as it lives."""

    def __init__(self, raw: object, data: bytes | None) -> None:
        super().__init__(raw)
        self.data = data


def _load_error(code: int) -> InvalidInput:
    if code == pdfium.raw.FPDF_ERR_PASSWORD:
        return InvalidInput(
            "Invalid input file: encrypted PDF (password protected); send it decrypted"
        )
    reason = _LOAD_ERRORS.get(code, f"PDFium error {code}")
    return InvalidInput(f"Invalid input file: not a readable PDF ({reason})")


_LOAD_ERRORS = {
    pdfium.raw.FPDF_ERR_FILE: "file not found or could not be opened",
    pdfium.raw.FPDF_ERR_FORMAT: "data format error",
    pdfium.raw.FPDF_ERR_SECURITY: "unsupported security scheme",
    pdfium.raw.FPDF_ERR_UNKNOWN: "unknown error",
}


def render_pdf_page(doc: pdfium.PdfDocument, index: int, limits: DecodeLimits) -> np.ndarray:
    """Render one page to BGR at `render_scale` (`pdf_render_scale`, lowered for pages over
    `max_page_side_px`), checking the pixel cap before rendering.

    The caller holds `PDFIUM_LOCK` and has called `doc.init_forms()`.

    Raises:
        InvalidInput: the page does not load (a page tree that counts more pages than it holds),
            or it is over the pixel cap.
    """
    try:
        page = doc[index]
    except pdfium.PdfiumError as err:
        raise InvalidInput(
            f"Invalid input file: page {index + 1} of the PDF cannot be read ({err})"
        ) from err
    try:
        width, height = page.get_size()
        full = limits.pdf_render_scale
        _check_pixels(int(height * full), int(width * full), limits)
        bitmap = page.render(scale=render_scale(width, height, limits), rotation=0)
        # pypdfium2 renders BGR(x) by default, which is what the pipeline expects.
        array = bitmap.to_numpy()
        return np.ascontiguousarray(array[:, :, :3])
    finally:
        page.close()


def _check_pixels(height: int, width: int, limits: DecodeLimits) -> None:
    if height <= 0 or width <= 0:
        raise InvalidInput("Invalid input file: the image is empty")
    if height * width > limits.max_image_pixels:
        raise InvalidInput(
            f"The image is {width} x {height} = {width * height} pixels; the limit is "
            f"{limits.max_image_pixels} (input.max_image_pixels)"
        )
