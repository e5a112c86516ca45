"""Pages of a document, one at a time: counted, sized from headers, decoded."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import NamedTuple

import numpy as np

# pdfium is process-global and not thread-safe: share the lock `readers` renders under.
from serving.decode.readers import (
    PDFIUM_LOCK,
    TO_JOBS,
    DecodeLimits,
    FileKind,
    decode_image_page,
    fit_page,
    fit_side,
    frames_to_tiff,
    image_page_count,
    image_page_sizes,
    is_animated,
    no_such_page,
    open_pdf,
    pdf_page_size,
    render_pdf_page,
)
from serving.errors import InvalidInput


def count_pages(source: bytes | str | Path, kind: FileKind) -> int:
    """Pages in a document: for an image, its frames when it is read by frames, else 1.

    Raises:
        InvalidInput: not a readable PDF, or one with no pages; an unreadable stored file.
    """
    if kind == "image":
        return image_page_count(_read(source))
    with PDFIUM_LOCK:
        doc = open_pdf(source if isinstance(source, bytes) else str(source))
        try:
            count = len(doc)  # at least 1: `open_pdf` refuses a PDF with no pages
        finally:
            doc.close()
    return count


def stage_document(path: str, kind: FileKind, limits: DecodeLimits) -> int:
    """Ready a job's stored document for reading page by page; returns its page count.

    Pages are counted (and an image's frames checked against `max_frames_per_document`); an
    animated GIF or WebP is decoded once, in one pass, and stored in place as a multi-page TIFF,
    since reading its frame i alone decodes frames 0..i (a 1,000-frame GIF read page by page
    cost ~500,000 frame decodes). Runs in a CPU worker: it parses untrusted bytes.

    Raises:
        InvalidInput: the file does not read as a document, or a limit is exceeded.
    """
    if kind == "pdf":
        return count_pages(path, kind)
    data = _read(path)
    pages = image_page_count(data, limits)
    if pages > 1 and is_animated(data):
        staged = f"{path}.tiff"
        try:
            frames_to_tiff(data, staged, limits)
            os.replace(staged, path)
        finally:
            Path(staged).unlink(missing_ok=True)
    return pages


class StagingPlan(NamedTuple):
    """What readying a stored document (`stage_document`) will decode, from its headers."""

    pages: int
    frame_pixels: int
    """Pixels of each frame decoded to convert an animated image (its logical screen, which
    every frame is drawn onto whatever the frame's own size); 0: nothing is decoded (a PDF, a
    single image, a TIFF)."""

    @property
    def decoded_pixels(self) -> int:
        """Pixels decoded in all: the conversion's work."""
        return self.pages * self.frame_pixels


def staging_plan(path: str, kind: FileKind, limits: DecodeLimits) -> StagingPlan:
    """What `stage_document` will decode, read from the headers (a PDF's pages are counted), so
    that the server can charge it and refuse it before any frame is decoded.

    Raises:
        InvalidInput: the file does not read as a document, or a limit is exceeded.
    """
    if kind == "pdf":
        return StagingPlan(count_pages(path, kind), 0)
    data = _read(path)
    pages = image_page_count(data, limits)
    if pages > 1 and is_animated(data):
        ((width, height),) = image_page_sizes(data, limits, only=0)
        return StagingPlan(pages, width * height)
    return StagingPlan(pages, 0)


def page_sizes(
    source: bytes | str | Path, kind: FileKind, limits: DecodeLimits, *, index: int | None = None
) -> list[tuple[int, int]]:
    """(width, height) of each page as `decode_page` will decode it, or of page `index` only,
    from the PDF's page tree or the image's headers: no pixel is decoded.

    Every page counts against `max_pdf_pages` unless one `index` is asked for (batch jobs).

    Raises:
        InvalidInput: the file does not open, the page does not exist, or a limit is exceeded.
    """
    if kind == "image":
        sizes = image_page_sizes(_read(source), limits, only=index)
        return [fit_side(w, h, limits.max_page_side_px) for w, h in sizes]
    with PDFIUM_LOCK:
        doc = open_pdf(source if isinstance(source, bytes) else str(source))
        try:
            count = len(doc)
            if index is not None:
                if not 0 <= index < count:
                    raise no_such_page("pdf", count, index)
                return [pdf_page_size(doc, index, limits)]
            if count > limits.max_pdf_pages:
                raise InvalidInput(
                    f"The PDF has {count} pages; this server accepts at most "
                    f"{limits.max_pdf_pages} per request (input.max_pdf_pages){TO_JOBS}"
                )
            return [pdf_page_size(doc, i, limits) for i in range(count)]
        finally:
            doc.close()


class PagePlan(NamedTuple):
    """A page's sizes from the headers, before any pixel is decoded."""

    width: int
    height: int
    """As `decode_page` decodes it: no side over `max_page_side_px`."""
    full_width: int
    full_height: int
    """As sent (an image's pixels; a PDF page at `pdf_render_scale`); what `decode_page` decodes
    first for an image, before it is downscaled."""

    @property
    def scaled(self) -> bool:
        """Whether the page is decoded smaller than sent."""
        return (self.width, self.height) != (self.full_width, self.full_height)


def page_plans(
    source: bytes | str | Path, kind: FileKind, limits: DecodeLimits, *, index: int | None = None
) -> list[PagePlan]:
    """`page_sizes`, with each page's size as sent beside its size as decoded."""
    full = page_sizes(source, kind, dataclasses.replace(limits, max_page_side_px=0), index=index)
    if kind == "image":
        return [PagePlan(*fit_side(w, h, limits.max_page_side_px), w, h) for w, h in full]
    if limits.max_page_side_px <= 0 or all(max(size) <= limits.max_page_side_px for size in full):
        return [PagePlan(w, h, w, h) for w, h in full]
    decoded = page_sizes(source, kind, limits, index=index)
    return [PagePlan(*size, *sent) for size, sent in zip(decoded, full, strict=True)]


def _read(source: bytes | str | Path) -> bytes:
    try:
        return source if isinstance(source, bytes) else Path(source).read_bytes()
    except OSError as err:
        raise InvalidInput(f"Cannot read the stored file: {err.strerror}") from err


def decode_page(
    source: bytes | str | Path, kind: FileKind, index: int, limits: DecodeLimits
) -> np.ndarray:
    """Page `index` of a document as BGR uint8: a frame of an image, or one rendered PDF page.

    `source` is the file's bytes or its path. Requests and batch jobs both read their pages here,
    so a job's results equal `/v1/ocr`'s. A page whose longer side is over
    `max_page_side_px` is decoded smaller: a PDF page rendered at a lower scale, an image
    downscaled as soon as it is decoded.

    Raises:
        InvalidInput: the file does not decode, the page does not exist, or a limit is exceeded.
    """
    if kind == "image":
        return fit_page(decode_image_page(_read(source), index, limits), limits)
    with PDFIUM_LOCK:
        doc = open_pdf(source if isinstance(source, bytes) else str(source))
        try:
            count = len(doc)
            if not 0 <= index < count:
                raise no_such_page("pdf", count, index)
            doc.init_forms()
            return render_pdf_page(doc, index, limits)
        finally:
            doc.close()
