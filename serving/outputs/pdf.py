"""Searchable PDF: the pages as sent, with an invisible text layer whose words sit on their boxes.

The text layer is set with fpdf2 (what OCRmyPDF 17 renders its text layers with) in a glyphless
font (`fonts/Occulta.ttf`) in render mode 3 (invisible): each word at its box's left edge, on a
baseline a fifth of the box's height above its bottom, its size the box's height and its
horizontal scaling stretched to the box's width, so a viewer's selection and `pdftotext -bbox`
find it where the word is printed. Words go in reading order (`Document` pages are), which is
the order `pdftotext -raw` reads them.

- Image uploads: each page is the image itself, embedded as sent where PDF can hold it (a JPEG
  stays a JPEG, DCT-encoded, never recompressed; PNG goes in as Flate, as fpdf2 does), else
  (TIFF, WebP, BMP, GIF, a multi-frame file's frames, a JPEG rotated by its EXIF orientation)
  losslessly as Flate; the page is the image's size at its resolution (300 dpi when it has none).
- PDF uploads: the original pages are kept as they are and the text layer is grafted on as a
  form XObject drawn over each page's content (pikepdf, as OCRmyPDF grafts its layer), turned to
  match the page's /Rotate (the OCR read the page as shown); never re-rasterised.
- A page the page classifier read turned (`Page.turn`) is shown upright, as OCRmyPDF's
  `--rotate-pages` does: an image drawn turned on a page of the upright size, a PDF page's
  /Rotate changed; the text layer is set on the upright page. Pages that
  have text already get no layer unless the document's `mode` says (`serving.outputs.pdf_text`).
- No source: blank pages of the OCR pages' size with the text layer (a stored job whose upload
  is gone).
"""

from __future__ import annotations

import io
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import cv2
import numpy as np
import pikepdf
from fpdf import FPDF
from PIL import Image, ImageOps

from serving.errors import InvalidInput
from serving.outputs.deskew import levelled
from serving.outputs.document import Document, Page
from serving.outputs.pdf_layer import write_layer
from serving.outputs.pdf_text import pages_with_text

FONT = Path(__file__).parent / "fonts" / "Occulta.ttf"
_FONT_NAME = "Occulta"
_DEFAULT_DPI = 300.0
_CHUNK_BYTES = 1 << 20


@dataclass(frozen=True, slots=True)
class _Placement:
    """Where one OCR page goes in the PDF: its size in points, and points per OCR pixel."""

    width_pt: float
    height_pt: float

    def scale(self, page: Page) -> tuple[float, float]:
        return self.width_pt / max(page.width, 1), self.height_pt / max(page.height, 1)


def render(document: Document) -> Iterator[bytes]:
    """The document as a searchable PDF, in pieces of at most 1 MiB.

    Raises:
        ValueError: the source is a PDF with fewer pages than the document, or an image that
            does not open.
    """
    data = _build(document)
    for start in range(0, len(data), _CHUNK_BYTES):
        yield data[start : start + _CHUNK_BYTES]


def _build(document: Document) -> bytes:
    source = document.source
    if source is not None and source.media_type == "application/pdf":
        return _graft(document, source.read())
    pdf = _new_pdf(document)
    raw = source.read() if source is not None else None
    for page in document.pages:
        tilt = page.skew if document.deskew else 0.0
        placement = _Placement(page.width, page.height)
        if raw is not None:
            placement = _image_page(pdf, raw, page, tilt)
        else:
            pdf.add_page(format=(placement.width_pt, placement.height_pt))
        _text_layer(pdf, levelled(page) if tilt else page, placement)
    return bytes(pdf.output())


def _new_pdf(document: Document) -> FPDF:
    pdf = FPDF(unit="pt")
    pdf.set_auto_page_break(False)
    pdf.set_margin(0)
    pdf.set_creator("ocr-serving")
    pdf.set_title(document.name)
    pdf.add_font(_FONT_NAME, fname=str(FONT))
    pdf.set_font(_FONT_NAME, size=10)
    return pdf


def _image_page(pdf: FPDF, raw: bytes, page: Page, tilt: float = 0.0) -> _Placement:
    """Adds a page holding frame `page.index` of the image (turned back by `tilt` degrees, the
    page's skew, when it is straightened), returns where its OCR page lies.

    Raises:
        InvalidInput: neither Pillow nor OpenCV reads the image (the OCR read it with OpenCV).
    """
    try:
        return _embed(pdf, raw, page, tilt)
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError):
        # An image OpenCV decodes and Pillow does not (a truncated JPEG, say): its pixels, as
        # the OCR saw them, go in losslessly.
        decoded = cv2.imdecode(np.frombuffer(raw, np.uint8), cv2.IMREAD_COLOR)
        if decoded is None or page.index != 0:
            raise InvalidInput("The image could not be read to embed it in the PDF") from None
        frame = Image.fromarray(np.ascontiguousarray(decoded[:, :, ::-1]))
        placement = _Placement(
            frame.width * 72.0 / _DEFAULT_DPI, frame.height * 72.0 / _DEFAULT_DPI
        )
        pdf.add_page(format=(placement.width_pt, placement.height_pt))
        with pdf.rotation(-tilt, x=placement.width_pt / 2, y=placement.height_pt / 2):
            pdf.image(frame, x=0, y=0, w=placement.width_pt, h=placement.height_pt)
        return placement


def _embed(pdf: FPDF, raw: bytes, page: Page, tilt: float) -> _Placement:
    with warnings.catch_warnings(action="ignore"), Image.open(io.BytesIO(raw)) as image:
        frames = getattr(image, "n_frames", 1)
        if page.index >= frames:
            raise ValueError(f"page {page.index} of an image of {frames} frames")
        image.seek(page.index)
        dpi = _dpi(image)
        as_sent = (
            frames == 1
            and image.format in ("JPEG", "PNG")
            and image.getexif().get(0x0112, 1) in (0, 1)  # no EXIF rotation
        )
        if as_sent:
            width, height = image.size
            picture: bytes | Image.Image = raw
        else:
            frame = ImageOps.exif_transpose(image) if frames == 1 else image.copy()
            if frame.mode not in ("RGB", "L", "1", "RGBA", "LA"):
                frame = frame.convert("RGBA" if "A" in frame.getbands() else "RGB")
            width, height = frame.size
            picture = frame
    width_pt, height_pt = width * 72.0 / dpi[0], height * 72.0 / dpi[1]
    # A page read turned (`Page.turn`) is shown upright, as OCRmyPDF's --rotate-pages shows it:
    # the page has the upright size and the image, as sent, is drawn turned onto it.
    placement = (
        _Placement(height_pt, width_pt) if page.turn % 180 else _Placement(width_pt, height_pt)
    )
    pdf.add_page(format=(placement.width_pt, placement.height_pt))
    centre_x, centre_y = placement.width_pt / 2, placement.height_pt / 2
    # Straightened (`tilt`, the page's skew): turned back by it too, about the same centre, and
    # cut to the page, as OCRmyPDF's --deskew keeps the page's size.
    with pdf.rotation(page.turn - tilt, x=centre_x, y=centre_y):
        pdf.image(
            io.BytesIO(picture) if isinstance(picture, bytes) else picture,
            x=centre_x - width_pt / 2,
            y=centre_y - height_pt / 2,
            w=width_pt,
            h=height_pt,
        )
    return placement


def _dpi(image: Image.Image) -> tuple[float, float]:
    info = image.info.get("dpi")
    try:
        x, y = (float(v) for v in info) if info else (0.0, 0.0)
    except (TypeError, ValueError):
        x = y = 0.0
    if x < 10 or y < 10:  # absent, or a placeholder such as 1 x 1
        return _DEFAULT_DPI, _DEFAULT_DPI
    return x, y


def _text_layer(pdf: FPDF, page: Page, placement: _Placement) -> None:
    """The page's lines, invisible, each word on its box (`serving.outputs.pdf_layer`)."""
    write_layer(pdf, page, placement.scale(page), _FONT_NAME)


def _graft(document: Document, original: bytes) -> bytes:
    """The original PDF with each OCR page's text layer laid over its page.

    Raises:
        InvalidInput: qpdf cannot read the PDF (pdfium, which rendered it for the OCR, could).
    """
    indices = [page.index for page in document.pages]
    original, kept = pages_with_text(original, indices, document.mode)
    try:
        return _graft_onto(document, pikepdf.open(io.BytesIO(original)), kept)
    except pikepdf.PdfError as err:
        raise InvalidInput(f"The PDF could not be read to add its text layer: {err}") from None


def _graft_onto(document: Document, opened: pikepdf.Pdf, kept: set[int]) -> bytes:
    with opened as pdf:
        if any(page.index >= len(pdf.pages) for page in document.pages):
            raise ValueError(f"the PDF has {len(pdf.pages)} pages; the OCR has more")
        layer = _new_pdf(document)
        shown = []
        for page in document.pages:
            if page.index in kept:
                continue  # its own text stays, alone
            target = pdf.pages[page.index]
            box = pikepdf.Rectangle(target.cropbox)
            rotate = int(target.obj.get("/Rotate", 0)) % 360
            if page.turn:
                # Read turned counter-clockwise from how it was shown: shown so from now on (a
                # viewer turns a page clockwise by /Rotate), as OCRmyPDF's --rotate-pages does.
                rotate = (rotate - page.turn) % 360
                target.obj[pikepdf.Name.Rotate] = rotate
            # The OCR read the page as shown (pdfium turns it by /Rotate): the layer is set in
            # that orientation and turned back onto the page.
            width, height = (box.height, box.width) if rotate % 180 else (box.width, box.height)
            placement = _Placement(float(width), float(height))
            layer.add_page(format=(placement.width_pt, placement.height_pt))
            tilt = page.skew if document.deskew else 0.0
            _text_layer(layer, levelled(page) if tilt else page, placement)
            shown.append((target, box, rotate, placement, tilt))
        if not shown:
            layer.add_page()  # fpdf2 writes no document without a page; this one is not used
        with pikepdf.open(io.BytesIO(bytes(layer.output()))) as text:
            laid = zip(text.pages[: len(shown)], shown, strict=True)
            for text_page, (target, box, rotate, placement, tilt) in laid:
                form = pdf.copy_foreign(text_page.as_form_xobject())
                name = target.add_resource(form, pikepdf.Name.XObject, prefix="OcrText")
                # Centre the layer on the origin, turn it counter-clockwise by the page's /Rotate
                # (which a viewer turns clockwise to show it), and centre it on the crop box.
                matrix = (
                    pikepdf.Matrix().translated(-placement.width_pt / 2, -placement.height_pt / 2)
                    @ pikepdf.Matrix().rotated(rotate)
                    @ pikepdf.Matrix().translated(
                        float(box.llx) + float(box.width) / 2,
                        float(box.lly) + float(box.height) / 2,
                    )
                )  # applied left to right
                # The page's own content in its own graphics state (straightened: turned back by
                # its skew about the crop box's centre), then the layer on top.
                centre = (
                    float(box.llx) + float(box.width) / 2,
                    float(box.lly) + float(box.height) / 2,
                )
                straighten = (
                    pikepdf.Matrix().translated(-centre[0], -centre[1])
                    @ pikepdf.Matrix().rotated(-tilt)
                    @ pikepdf.Matrix().translated(*centre)
                )
                opening: list[tuple[list[pikepdf.Object], pikepdf.Operator]] = [
                    ([], pikepdf.Operator("q"))
                ]
                if tilt:
                    shorthand = cast(list[pikepdf.Object], list(straighten.shorthand))
                    opening.append((shorthand, pikepdf.Operator("cm")))
                target.contents_add(pikepdf.unparse_content_stream(opening), prepend=True)
                target.contents_add(
                    pikepdf.unparse_content_stream(
                        [
                            ([], pikepdf.Operator("Q")),
                            ([], pikepdf.Operator("q")),
                            (
                                cast(list[pikepdf.Object], list(matrix.shorthand)),
                                pikepdf.Operator("cm"),
                            ),
                            ([name], pikepdf.Operator("Do")),
                            ([], pikepdf.Operator("Q")),
                        ]
                    )
                )
            out = io.BytesIO()
            pdf.save(out)
    return out.getvalue()
