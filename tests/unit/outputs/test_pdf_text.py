"""A searchable PDF made from a PDF that has text (serving/outputs/pdf_text.py): `mode` skip (the
default) keeps such pages as they are, force lays the OCR over them too, redo replaces an earlier
OCR layer. A born-digital page used to read its text twice (issue 39, item 3)."""

from __future__ import annotations

import dataclasses
import io

import cv2
import numpy as np
from fpdf import FPDF

from serving.outputs.document import Document, Page, Source, group_blocks, make_line
from serving.outputs.formats import render_bytes
from tests.poppler import needs_poppler, pdftotext

WIDTH, HEIGHT = 1200, 800
"""The OCR page, in pixels; the PDF page is 288 x 192 pt (300 dpi)."""


def _document(pdf: bytes, text: str, pages: int = 1) -> Document:
    line = make_line(text, 0.9, [[100, 100], [700, 100], [700, 140], [100, 140]])
    shown = tuple(
        Page(width=WIDTH, height=HEIGHT, blocks=group_blocks([line]), index=i) for i in range(pages)
    )
    return Document(name="in.pdf", pages=shown, source=Source("application/pdf", pdf))


def _scan() -> bytes:
    image = np.full((HEIGHT, WIDTH, 3), 255, np.uint8)
    cv2.putText(image, "scan", (50, 700), cv2.FONT_HERSHEY_SIMPLEX, 3, (0, 0, 0), 5)
    return cv2.imencode(".jpg", image)[1].tobytes()


def _pdf(*, born_digital: list[bool]) -> bytes:
    """Pages of printed text (born digital) or of a scanned image without text."""
    pdf = FPDF(unit="pt", format=(288, 192))
    pdf.set_font("helvetica", size=14)
    for digital in born_digital:
        pdf.add_page()
        if digital:
            pdf.text(20, 40, "Shared MIME-info Database")
        else:
            pdf.image(io.BytesIO(_scan()), x=0, y=0, w=288, h=192)
    return bytes(pdf.output())


def _words(pdf: bytes) -> list[str]:
    return pdftotext(pdf, "-raw").split()


@needs_poppler
def test_skip_keeps_a_page_with_text_as_it_is_and_reads_it_once() -> None:
    source = _pdf(born_digital=[True])
    assert _words(source) == ["Shared", "MIME-info", "Database"]
    out = render_bytes(_document(source, "Shared MIME-info Database"), "pdf")
    assert _words(out) == ["Shared", "MIME-info", "Database"]  # not twice


@needs_poppler
def test_skip_lays_the_ocr_on_pages_without_text_only() -> None:
    source = _pdf(born_digital=[True, False])
    out = render_bytes(_document(source, "recognised words", pages=2), "pdf")
    pages = pdftotext(out, "-raw").split("\f")
    assert pages[0].split() == ["Shared", "MIME-info", "Database"]
    assert pages[1].split() == ["recognised", "words"]


@needs_poppler
def test_force_lays_the_ocr_over_every_page() -> None:
    document = dataclasses.replace(_document(_pdf(born_digital=[True]), "OCR words"), mode="force")
    assert _words(render_bytes(document, "pdf")) == [
        "Shared",
        "MIME-info",
        "Database",
        "OCR",
        "words",
    ]


@needs_poppler
def test_redo_replaces_an_earlier_ocr_layer_and_keeps_printed_text() -> None:
    scanned = _pdf(born_digital=[False, True])
    first = render_bytes(_document(scanned, "first reading", pages=2), "pdf")
    assert pdftotext(first, "-raw").split("\f")[0].split() == ["first", "reading"]
    again = _document(first, "second reading", pages=2)
    skipped = pdftotext(render_bytes(again, "pdf"), "-raw").split("\f")
    assert skipped[0].split() == ["first", "reading"]  # skip: the page has text
    redone = pdftotext(render_bytes(dataclasses.replace(again, mode="redo"), "pdf"), "-raw")
    pages = redone.split("\f")
    assert pages[0].split() == ["second", "reading"]  # the earlier layer gone, not beside it
    assert pages[1].split() == ["Shared", "MIME-info", "Database"]  # printed text kept, alone


@needs_poppler
def test_a_line_read_as_blanks_only_lays_nothing_and_fails_nothing() -> None:
    """A line whose text is an ideographic space has no words: before, the PDF failed (500)."""
    scan = Document(
        name="scan.jpg", pages=_document(b"", "\u3000").pages, source=Source("image/jpeg", _scan())
    )
    assert _words(render_bytes(scan, "pdf")) == []
