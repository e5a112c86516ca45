"""`write_document`: stored page records and the original upload written as each output format,
read back by real consumers (poppler's `pdftotext`, pikepdf, an XML parser); a page without a
record keeps its place, at its size, without text."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pikepdf
import pytest
from fpdf import FPDF
from lxml import etree

from serving.decode.readers import DecodeLimits
from serving.jobs.document_files import write_document
from tests import images

LIMITS = DecodeLimits(max_pdf_pages=100, pdf_render_scale=2.0, max_image_pixels=100_000_000)
LATIN = images.latin_lines()
pdftotext = pytest.mark.skipif(shutil.which("pdftotext") is None, reason="poppler-utils missing")


def _record(page: int, lines: list[str], width: int, height: int) -> dict[str, Any]:
    """A page record as the jobs store keeps it: lines where `tests.images` draws them."""
    step = int(32 * 1.8)
    rows = []
    for i, text in enumerate(lines):
        x0, y0 = 40, 40 + i * step
        x1, y1 = min(width - 1, x0 + 18 * len(text)), y0 + 38
        rows.append({"text": text, "score": 0.99, "box": [[x0, y0], [x1, y0], [x1, y1], [x0, y1]]})
    return {
        "file": "doc",
        "file_index": 0,
        "page": page,
        "width": width,
        "height": height,
        "lines": rows,
    }


def _pdftotext(path: Path, page: int) -> str:
    out = subprocess.run(
        ["pdftotext", "-f", str(page + 1), "-l", str(page + 1), str(path), "-"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return " ".join(out.split())


@pdftotext
def test_an_image_upload_becomes_a_searchable_pdf(tmp_path: Path) -> None:
    source = tmp_path / "latin.png"
    source.write_bytes(images.encode_png(LATIN.image))
    height, width = LATIN.image.shape[:2]
    dest = tmp_path / "out" / "0.pdf"
    size = write_document(
        dest,
        "pdf",
        name="scans/latin.png",
        records=[_record(0, LATIN.lines, width, height)],
        kind="image",
        pages=1,
        source=source,
        limits=LIMITS,
    )
    assert size == dest.stat().st_size
    assert _pdftotext(dest, 0) == " ".join(" ".join(LATIN.lines).split())
    with pikepdf.open(dest) as pdf:
        (image,) = pdf.pages[0].get_images().values()
        assert (int(image.Width), int(image.Height)) == (width, height)
    assert not list((tmp_path / "out").glob(".*"))  # no temporary file left


@pdftotext
def test_a_pdf_keeps_every_page_and_a_page_without_result_has_no_text(tmp_path: Path) -> None:
    source = tmp_path / "three.pdf"
    source.write_bytes(images.make_pdf([LATIN.image] * 3, dpi=144.0))
    height, width = LATIN.image.shape[:2]  # at 144 dpi and scale 2.0: the image's pixels
    failed = {
        "file": "three.pdf",
        "file_index": 0,
        "page": 1,
        "error": {"code": "x", "message": "y"},
    }
    records = [
        _record(0, LATIN.lines, width, height),
        failed,
        _record(2, LATIN.lines[:2], width, height),
    ]
    out: dict[str, Path] = {}
    for fmt in ("pdf", "hocr", "alto", "text", "json"):
        out[fmt] = tmp_path / f"three.{fmt}"
        write_document(
            out[fmt],
            fmt,
            name="three.pdf",
            records=records,
            kind="pdf",
            pages=3,
            source=source,
            limits=LIMITS,
        )
    with pikepdf.open(out["pdf"]) as pdf:
        assert len(pdf.pages) == 3
    assert _pdftotext(out["pdf"], 0) == " ".join(" ".join(LATIN.lines).split())
    assert _pdftotext(out["pdf"], 1) == ""
    assert _pdftotext(out["pdf"], 2) == " ".join(" ".join(LATIN.lines[:2]).split())

    hocr = etree.parse(str(out["hocr"]), etree.HTMLParser())
    pages = hocr.xpath("//*[contains(@class, 'ocr_page')]/@title")
    assert len(pages) == 3
    assert all(f"bbox 0 0 {width} {height}" in title for title in pages)  # page 1 from the PDF
    alto = etree.parse(str(out["alto"]))
    alto_pages = alto.xpath("//*[local-name()='Page']")
    assert [(int(p.get("WIDTH")), int(p.get("HEIGHT"))) for p in alto_pages] == [
        (width, height)
    ] * 3

    text = out["text"].read_text()
    assert LATIN.lines[0] in text
    assert LATIN.lines[3] in text
    body = json.loads(out["json"].read_text())
    assert body["name"] == "three.pdf"
    assert [("error" in page) for page in body["pages"]] == [False, True, False]
    assert body["pages"][1]["error"]["code"] == "x"
    assert sorted(i for block in body["pages"][0]["blocks"] for i in block["lines"]) == [0, 1, 2, 3]


@pdftotext
@pytest.mark.parametrize(("mode", "times"), [("skip", 1), ("force", 2)])
def test_a_pdf_with_text_is_read_once_unless_forced(tmp_path: Path, mode: str, times: int) -> None:
    """A job's document and `ocr-batch --format pdf` of a born-digital PDF: the default (skip)
    keeps its text alone; it used to come out twice (issue 39, item 3)."""
    printed = FPDF(unit="pt", format=(288, 192))
    printed.set_font("helvetica", size=14)
    printed.add_page()
    printed.text(20, 40, "Shared MIME-info Database")
    source = tmp_path / "printed.pdf"
    source.write_bytes(bytes(printed.output()))
    dest = tmp_path / "out.pdf"
    write_document(
        dest,
        "pdf",
        name="printed.pdf",
        records=[_record(0, ["Shared MIME-info Database"], 576, 384)],
        kind="pdf",
        pages=1,
        source=source,
        limits=LIMITS,
        mode=mode,  # type: ignore[arg-type]
    )
    assert _pdftotext(dest, 0) == " ".join(["Shared MIME-info Database"] * times)


@pdftotext
def test_deskew_turns_the_stored_pages_image_by_its_recorded_skew(tmp_path: Path) -> None:
    source = tmp_path / "latin.png"
    source.write_bytes(images.encode_png(LATIN.image))
    height, width = LATIN.image.shape[:2]
    record = {**_record(0, LATIN.lines, width, height), "skew": 1.5}
    turns = {}
    for deskew in (False, True):
        dest = tmp_path / f"{deskew}.pdf"
        write_document(
            dest, "pdf", name="latin.png", records=[record], kind="image", pages=1,
            source=source, limits=LIMITS, deskew=deskew,
        )  # fmt: skip
        with pikepdf.open(dest) as pdf:
            turns[deskew] = [
                op.operands
                for op in pikepdf.parse_content_stream(pdf.pages[0])
                if isinstance(op, pikepdf.ContentStreamInstruction)
                and str(op.operator) == "cm"
                and abs(float(op.operands[1])) > 1e-6
            ]
        assert _pdftotext(dest, 0) == " ".join(" ".join(LATIN.lines).split())
    assert turns[False] == []
    (matrix, *_) = turns[True]
    angle = np.degrees(np.arctan2(float(matrix[1]), float(matrix[0])))
    assert angle == pytest.approx(-1.5, abs=0.01)  # turned back (clockwise) by the skew
