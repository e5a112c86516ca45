"""The text a PDF already has, for the searchable PDF's `mode` (OCRmyPDF's `--mode`).

A born-digital page made searchable again read its text twice (`pdftotext`: "Shared MIME-info /
Shared / MIME-info Database / Database"): the page's own text, then the OCR layer over it. So a
PDF page that has text is handled by the document's mode:

- `skip` (the default): a page with any text is kept as it is, without an OCR layer; the other
  pages get theirs. Nothing is ever found twice.
- `redo`: a page whose only text is invisible (an earlier OCR layer: render mode 3, as ours,
  OCRmyPDF's and Tesseract's are) loses that text and gets this OCR's layer instead; a page with
  visible text is kept as it is, as with `skip`.
- `force`: every page gets the OCR layer, over whatever text it has (its text is then found
  twice). Unlike OCRmyPDF's `--force-ocr`, the page is not rasterised: it is kept as it is.
"""

from __future__ import annotations

import io
from typing import Literal

import pypdfium2 as pdfium
import pypdfium2.raw as pdfium_c

from serving.decode.readers import PDFIUM_LOCK
from serving.outputs.document import TextMode


def _invisible(obj: pdfium.PdfObject) -> bool:
    mode = pdfium_c.FPDFTextObj_GetTextRenderMode(obj.raw)
    return bool(mode == pdfium_c.FPDF_TEXTRENDERMODE_INVISIBLE)


def _texts(obj: pdfium.PdfObject) -> tuple[int, int, int]:
    """(visible text objects, invisible ones, other objects) in `obj`, forms opened."""
    if obj.type == pdfium_c.FPDF_PAGEOBJ_TEXT:
        return (0, 1, 0) if _invisible(obj) else (1, 0, 0)
    if obj.type != pdfium_c.FPDF_PAGEOBJ_FORM:
        return (0, 0, 1)
    visible = invisible = other = 0
    for index in range(pdfium_c.FPDFFormObj_CountObjects(obj.raw)):
        child = pdfium.PdfObject(pdfium_c.FPDFFormObj_GetObject(obj.raw, index), page=obj.page)
        v, i, o = _texts(child)
        visible, invisible, other = visible + v, invisible + i, other + o
    return visible, invisible, other


def _page_text(page: pdfium.PdfPage, *, redo: bool) -> Literal["none", "kept", "removed"]:
    """Whether `page` has no text, keeps text of its own (and gets no OCR layer), or, with
    `redo`, had only invisible text (top-level text objects, and forms holding nothing but
    invisible text), now removed."""
    textpage = page.get_textpage()
    try:
        if textpage.count_chars() == 0:
            return "none"
    finally:
        textpage.close()
    if not redo:
        return "kept"
    removable = []
    for obj in page.get_objects(max_depth=0):
        visible, invisible, other = _texts(obj)
        if visible or (invisible and other):
            return "kept"  # visible text, or invisible text in a form with other content
        if invisible:
            removable.append(obj)
    for obj in removable:
        page.remove_obj(obj)
    page.gen_content()
    return "removed"


def pages_with_text(original: bytes, indices: list[int], mode: TextMode) -> tuple[bytes, set[int]]:
    """The PDF to lay the OCR layer on (with `redo`, its earlier OCR layers removed from the
    pages `indices` names), and which of those pages keep their own text and get no layer."""
    if mode == "force":
        return original, set()
    kept: set[int] = set()
    removed = False
    with PDFIUM_LOCK:
        try:
            pdf = pdfium.PdfDocument(original)
        except pdfium.PdfiumError:
            return original, kept  # the writer says what is wrong with it
        try:
            for index in indices:
                if not 0 <= index < len(pdf):
                    continue  # the writer refuses it, with the count
                page = pdf[index]
                try:
                    state = _page_text(page, redo=mode == "redo")
                finally:
                    page.close()
                kept.update([index] if state == "kept" else [])
                removed = removed or state == "removed"
            if not removed:
                return original, kept
            out = io.BytesIO()
            pdf.save(out)
            return out.getvalue(), kept
        finally:
            pdf.close()
