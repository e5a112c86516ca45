"""Real document pages: Debian's doc PDFs, rendered with pypdfium2; the int8 models' calibration
set (`serving.convert.calibration`), and the pages the bench, the load tests and the tests read."""

from __future__ import annotations

import unicodedata
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pypdfium2 as pdfium

__all__ = [
    "REAL_PDFS",
    "TextPage",
    "find_real_pdfs",
    "pdf_page_count",
    "pdf_page_text",
    "render_pdf_pages",
    "select_text_pages",
    "spread",
    "text_pages",
]

REAL_PDFS: tuple[Path, ...] = (
    # Debian package libtasn1-doc: 36 pages, English.
    Path("/usr/share/doc/libtasn1-doc/libtasn1.pdf"),
    # Debian package shared-mime-info: 17 pages, English.
    Path("/usr/share/doc/shared-mime-info/shared-mime-info-spec.pdf"),
    # Debian package maint-guide: 63 pages, English.
    Path("/usr/share/doc/maint-guide/maint-guide.en.pdf"),
    # Debian package maint-guide-zh-cn: 63 pages, Simplified Chinese mixed with English commands.
    Path("/usr/share/doc/maint-guide-zh-cn/maint-guide.zh-cn.pdf"),
)
"""PDFs with a text layer that Debian doc packages ship; scripts/system-deps.sh installs them."""

PdfSource = Path | bytes

_PDF_POINTS_PER_INCH = 72.0
# pdfium replaces a hyphen that splits a word at a line break (and the break) with U+FFFE; the
# rendered page shows "-", so the ground truth gets it back.
_PDFIUM_LINE_HYPHEN = "\ufffe"
# Table-of-contents pages are mostly dot leaders, which OCR reads as any number of dots.
_MAX_DOT_SHARE = 0.2


def find_real_pdfs() -> list[Path]:
    """The entries of ``REAL_PDFS`` that exist on this machine, in that order."""
    return [path for path in REAL_PDFS if path.is_file()]


@contextmanager
def _open(pdf: PdfSource) -> Iterator[Any]:
    doc = pdfium.PdfDocument(str(pdf) if isinstance(pdf, Path) else pdf)
    try:
        yield doc
    finally:
        doc.close()


def pdf_page_count(pdf: PdfSource) -> int:
    """Number of pages in ``pdf``."""
    with _open(pdf) as doc:
        return len(doc)


def _check_index(doc: Any, index: int) -> None:
    if not 0 <= index < len(doc):
        raise IndexError(f"page {index} out of range: the PDF has {len(doc)} pages")


def _page_to_bgr(page: Any, scale: float) -> np.ndarray:
    bitmap = page.render(scale=scale)
    try:
        # pypdfium2 renders to BGR by default (rev_byteorder=False), the order cv2 and PaddleX use.
        mode = str(bitmap.mode)
        if mode not in ("BGR", "BGRA", "BGRX"):
            raise ValueError(f"unexpected pdfium bitmap mode {mode!r}")
        pixels = np.asarray(bitmap.to_numpy())[:, :, :3]
        # Copy: the numpy view points into pdfium's buffer, which close() frees.
        return np.ascontiguousarray(pixels, dtype=np.uint8).copy()
    finally:
        bitmap.close()


def render_pdf_pages(
    pdf: PdfSource, *, dpi: float = 150, first: int = 0, count: int | None = None
) -> list[np.ndarray]:
    """Render pages ``first`` .. ``first + count - 1`` (to the end when ``count`` is None).

    Returns:
        One BGR uint8 HxWx3 array per page, white background, ``dpi`` pixels per inch.
    """
    if dpi <= 0:
        raise ValueError(f"dpi must be positive, got {dpi}")
    scale = dpi / _PDF_POINTS_PER_INCH
    with _open(pdf) as doc:
        n_pages = len(doc)
        last = n_pages if count is None else first + count
        if not 0 <= first <= last <= n_pages:
            raise IndexError(f"pages {first}..{last - 1} out of range: the PDF has {n_pages} pages")
        return [_page_to_bgr(doc[i], scale) for i in range(first, last)]


def _page_text(doc: Any, index: int) -> str:
    _check_index(doc, index)
    page = doc[index]
    textpage = page.get_textpage()
    try:
        text = str(textpage.get_text_range())
    finally:
        textpage.close()
    return text.replace(_PDFIUM_LINE_HYPHEN, "-")


def pdf_page_text(pdf: PdfSource, index: int) -> str:
    """The text layer of page ``index``: the ground truth for accuracy runs.

    Lines are separated by "\\r\\n" as pdfium extracts them; a word hyphenated at a line break
    comes back as "manip-ulation", as printed, without the break.
    """
    with _open(pdf) as doc:
        return _page_text(doc, index)


def _is_text_page(text: str, min_chars: int) -> bool:
    ink = [ch for ch in text if not ch.isspace()]
    alnum = sum(1 for ch in ink if unicodedata.category(ch)[0] in "LN")
    dots = sum(1 for ch in ink if ch in ".·…")
    return alnum >= min_chars and dots <= _MAX_DOT_SHARE * len(ink)


def select_text_pages(pdf: PdfSource, n: int, *, min_chars: int = 200) -> list[int]:
    """Pick ``n`` page indices with real text, spread evenly over the document.

    A page qualifies when its text layer has at least ``min_chars`` letters and digits and at
    most 20 % dots, which skips blank, cover and table-of-contents pages. Returns fewer than
    ``n`` indices, ascending, when fewer pages qualify.
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    with _open(pdf) as doc:
        candidates = [i for i in range(len(doc)) if _is_text_page(_page_text(doc, i), min_chars)]
    if n >= len(candidates):
        return candidates
    # The middle of n equal strata, so the pick does not cluster in the first chapter.
    return [candidates[(2 * k + 1) * len(candidates) // (2 * n)] for k in range(n)]


@dataclass(frozen=True)
class TextPage:
    """A page of a real PDF as the bench and the tests read it: the image and its text layer."""

    pdf: Path
    index: int
    image: np.ndarray
    text: str

    @property
    def label(self) -> str:
        """``<pdf stem>-p<page number from 1>``, as the bench names its pages and files."""
        return f"{self.pdf.stem}-p{self.index + 1}"


def text_pages(pdf: Path, n: int, *, dpi: float = 150) -> list[TextPage]:
    """The pages ``select_text_pages(pdf, n)`` picks, rendered at ``dpi``, with their text."""
    return [
        TextPage(pdf, index, image, pdf_page_text(pdf, index))
        for index in select_text_pages(pdf, n)
        for image in render_pdf_pages(pdf, dpi=dpi, first=index, count=1)
    ]


def spread(total: int, buckets: int) -> list[int]:
    """``total`` split over ``buckets`` as evenly as it goes, the first buckets one more."""
    return [total // buckets + (1 if i < total % buckets else 0) for i in range(buckets)]
