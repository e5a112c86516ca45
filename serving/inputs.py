"""Decoding request bodies into BGR pages: images with OpenCV, PDFs with pypdfium2."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Literal

import cv2
import numpy as np
import pypdfium2 as pdfium

from serving.errors import InvalidInput

FileKind = Literal["pdf", "image"]

# pdfium is not thread-safe; each CPU worker is a process, but tests call this from threads too.
PDFIUM_LOCK = threading.Lock()


@dataclass(frozen=True, slots=True, kw_only=True)
class DecodeLimits:
    """What one document may hold."""

    max_pdf_pages: int
    pdf_render_scale: float
    max_image_pixels: int


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


def decode_document(data: bytes, kind: FileKind, limits: DecodeLimits) -> list[np.ndarray]:
    """Decode `data` into BGR uint8 pages, refusing anything over `limits`.

    Raises:
        InvalidInput: the bytes do not decode, or a limit is exceeded.
    """
    if not data:
        raise InvalidInput("Invalid input file: empty file")
    if kind == "pdf":
        return render_pdf(data, limits)
    return [decode_image(data, limits)]


def decode_image(data: bytes, limits: DecodeLimits) -> np.ndarray:
    """Decode one image to BGR uint8 (alpha dropped), as PaddleX's `cv2.imdecode(IMREAD_COLOR)`."""
    buf = np.frombuffer(data, dtype=np.uint8)
    image = cv2.imdecode(buf, cv2.IMREAD_COLOR) if buf.size else None  # empty: cv2.error
    if image is None or image.size == 0:
        raise InvalidInput("Invalid input file: not a decodable image")
    _check_pixels(image.shape[0], image.shape[1], limits)
    return np.ascontiguousarray(image)


def render_pdf(data: bytes, limits: DecodeLimits) -> list[np.ndarray]:
    """Render every page of a PDF to BGR at `pdf_render_scale`; too many pages is an error."""
    with PDFIUM_LOCK:
        doc = open_pdf(data)
        try:
            count = len(doc)
            if count == 0:
                raise InvalidInput("Invalid input file: the PDF has no pages")
            if count > limits.max_pdf_pages:
                raise InvalidInput(
                    f"The PDF has {count} pages; this server accepts at most "
                    f"{limits.max_pdf_pages} per request (input.max_pdf_pages)"
                )
            doc.init_forms()
            return [render_pdf_page(doc, index, limits) for index in range(count)]
        finally:
            doc.close()


def open_pdf(source: bytes | str) -> pdfium.PdfDocument:
    """Open a PDF from bytes or a path; hold `PDFIUM_LOCK` while using it."""
    try:
        return pdfium.PdfDocument(source)
    except (pdfium.PdfiumError, OSError) as err:
        raise InvalidInput(f"Invalid input file: not a readable PDF ({err})") from err


def render_pdf_page(doc: pdfium.PdfDocument, index: int, limits: DecodeLimits) -> np.ndarray:
    """Render one page to BGR at `pdf_render_scale`, checking the pixel cap before rendering.

    The caller holds `PDFIUM_LOCK` and has called `doc.init_forms()`.
    """
    page = doc[index]
    try:
        width, height = page.get_size()
        scale = limits.pdf_render_scale
        _check_pixels(int(height * scale), int(width * scale), limits)
        bitmap = page.render(scale=scale, rotation=0)
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
