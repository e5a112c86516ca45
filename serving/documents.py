"""Pages of a document, one at a time: counted, sized from headers, decoded."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from serving.errors import InvalidInput

# pdfium is process-global and not thread-safe: share the lock `serving.inputs` renders under.
from serving.inputs import (
    PDFIUM_LOCK,
    DecodeLimits,
    FileKind,
    decode_image_page,
    image_page_count,
    image_page_sizes,
    open_pdf,
    pdf_page_size,
    render_pdf_page,
)


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
        return image_page_sizes(_read(source), limits, only=index)
    with PDFIUM_LOCK:
        doc = open_pdf(source if isinstance(source, bytes) else str(source))
        try:
            count = len(doc)
            if index is not None:
                if not 0 <= index < count:
                    raise InvalidInput(f"The PDF has {count} pages; there is no page {index + 1}")
                return [pdf_page_size(doc, index, limits)]
            if count > limits.max_pdf_pages:
                raise InvalidInput(
                    f"The PDF has {count} pages; this server accepts at most "
                    f"{limits.max_pdf_pages} per request (input.max_pdf_pages)"
                )
            return [pdf_page_size(doc, i, limits) for i in range(count)]
        finally:
            doc.close()


def _read(source: bytes | str | Path) -> bytes:
    try:
        return source if isinstance(source, bytes) else Path(source).read_bytes()
    except OSError as err:
        raise InvalidInput(f"Cannot read the stored file: {err.strerror}") from err


def decode_page(
    source: bytes | str | Path, kind: FileKind, index: int, limits: DecodeLimits
) -> np.ndarray:
    """Page `index` of a document as BGR uint8: a frame of an image, or one rendered PDF page.

    `source` is the file's bytes or its path. A PDF page renders exactly as `inputs.render_pdf`
    renders it, so a job's results equal `/v1/ocr`'s.

    Raises:
        InvalidInput: the file does not decode, the page does not exist, or a limit is exceeded.
    """
    if kind == "image":
        return decode_image_page(_read(source), index, limits)
    with PDFIUM_LOCK:
        doc = open_pdf(source if isinstance(source, bytes) else str(source))
        try:
            count = len(doc)
            if not 0 <= index < count:
                raise InvalidInput(f"The PDF has {count} pages; there is no page {index + 1}")
            doc.init_forms()
            return render_pdf_page(doc, index, limits)
        finally:
            doc.close()
