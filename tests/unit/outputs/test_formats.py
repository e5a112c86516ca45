"""The output formats read back by real consumers: poppler (`pdftotext`, `pdfimages`), qpdf,
pikepdf, the `hocr-spec` validator, OCRmyPDF's hOCR reader and renderer, `alto-tools`.

The documents here are written by hand (words on known boxes); tests/e2e/test_outputs.py runs
the same consumers on a real server's answers for real pages.
"""

from __future__ import annotations

import io
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import cv2
import numpy as np
import pikepdf
import pytest
from fpdf import FPDF

from pipelines.words import Word
from serving.errors import InvalidInput, NotAcceptable, ValidationFailed
from serving.outputs import pdf as pdf_output
from serving.outputs.document import Document, Page, Source, group_blocks, make_line
from serving.outputs.formats import negotiate, render_bytes
from tests.poppler import needs_poppler, pdfimages, pdftotext

BIN = Path(sys.executable).parent


def _line(text: str, x: int, y: int, widths: list[int], gap: int = 12, height: int = 30):
    """A line whose space-separated words are `widths` wide, `gap` apart, from (x, y)."""
    words, left = [], x
    for word, width in zip(text.split(" "), widths, strict=True):
        words.append(Word(text=word, box=(left, y, left + width, y + height), score=0.9))
        left += width + gap
    right = left - gap
    poly = [[x, y], [right, y], [right, y + height], [x, y + height]]
    return make_line(text, 0.9, poly, words)


def two_columns(source: Source | None = None, width: int = 1200, height: int = 800) -> Document:
    """A page of two columns of three lines each (lines of one row at one height), a title
    across both; the layout gives title, left column, right column."""
    lines = [_line("Two columns", 450, 40, [120, 168])]
    for row in range(3):  # columns 60 to 560 and 640 to 1140; the title crosses the gutter
        y = 150 + 45 * row
        lines.append(_line(f"left line {row}", 60, y, [200, 200, 76]))
        lines.append(_line(f"right line {row}", 640, y, [200, 200, 76]))
    lines.append(_line("中文abc 结束", 60, 285, [90, 120]))
    # "中文abc" is two words with no space between them (a CJK run, then Latin).
    cjk = lines[-1]
    x0, y0, _, y1 = cjk.words[0].box
    split = [
        Word("中文", (x0, y0, x0 + 55, y1), 0.9),
        Word("abc", (x0 + 55, y0, x0 + 90, y1), 0.9),
        cjk.words[1],
    ]
    lines[-1] = make_line(cjk.text, cjk.score, cjk.poly, split)
    page = Page(width=width, height=height, blocks=group_blocks(lines))
    return Document(name="two-columns.png", pages=(page,), source=source)


EXPECTED_LINES = [
    "Two columns",
    "left line 0",
    "left line 1",
    "left line 2",
    "中文abc 结束",
    "right line 0",
    "right line 1",
    "right line 2",
]


def _squash(text: str) -> str:
    return re.sub(r"\s+", "", text)


def _image(kind: str, width: int = 1200, height: int = 800) -> bytes:
    image = np.full((height, width, 3), 255, np.uint8)
    cv2.putText(image, "scan", (50, 700), cv2.FONT_HERSHEY_SIMPLEX, 3, (0, 0, 0), 5)
    ok, data = cv2.imencode(f".{kind}", image)
    assert ok
    return data.tobytes()


def test_negotiate_format_parameter_wins_over_accept() -> None:
    assert negotiate("pdf", "application/json") == "pdf"
    assert negotiate("TXT", None) == "text"
    with pytest.raises(ValidationFailed):
        negotiate("docx", None)


@pytest.mark.parametrize(
    ("accept", "fmt"),
    [
        (None, "json"),
        ("*/*", "json"),
        ("application/json", "json"),
        ("text/plain", "text"),
        ("text/vnd.hocr+html", "hocr"),
        ("application/alto+xml", "alto"),
        ("application/xml", "alto"),
        ("application/pdf", "pdf"),
        ("application/pdf;q=0.5, text/plain;q=0.9", "text"),
        ("image/png, application/pdf;q=0.1", "pdf"),
    ],
)
def test_negotiate_reads_accept(accept: str | None, fmt: str) -> None:
    assert negotiate(None, accept) == fmt


def test_negotiate_refuses_what_it_cannot_make() -> None:
    with pytest.raises(NotAcceptable) as info:
        negotiate(None, "image/png, application/pdf;q=0")
    assert info.value.http_status == 406


def test_text_reads_column_by_column() -> None:
    text = render_bytes(two_columns(), "text").decode()
    assert [line for line in text.splitlines() if line] == EXPECTED_LINES


def test_hocr_passes_the_validator_and_ocrmypdf_reads_it(tmp_path: Path) -> None:
    path = tmp_path / "page.hocr"
    path.write_bytes(render_bytes(two_columns(), "hocr"))
    checked = subprocess.run(
        [BIN / "hocr-spec", str(path)], capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "Document is valid" in checked.stdout + checked.stderr
    # OCRmyPDF's hOCR parser and its renderer make a PDF whose text is ours, in our order.
    pdf = tmp_path / "ocrmypdf.pdf"
    subprocess.run(
        [sys.executable, "-m", "ocrmypdf.hocrtransform", "-r", "72", str(path), str(pdf)],
        check=True,
        capture_output=True,
    )
    if shutil.which("pdftotext") is not None:
        text = subprocess.run(
            ["pdftotext", "-raw", str(pdf), "-"], capture_output=True, text=True, check=True
        ).stdout
        assert _squash(text) == _squash("".join(EXPECTED_LINES))


def test_hocr_elements_carry_boxes_and_confidences() -> None:
    root = ET.fromstring(render_bytes(two_columns(), "hocr"))
    ns = {"h": "http://www.w3.org/1999/xhtml"}
    words = root.findall(".//h:span[@class='ocrx_word']", ns)
    assert [w.text for w in words][:3] == ["Two", "columns", "left"]
    assert words[0].get("title") == "bbox 450 40 570 70; x_wconf 90"
    assert (
        root.find(".//h:div[@class='ocr_page']", ns)
        .get("title")
        .startswith(  # type: ignore[union-attr]
            'image "two-columns.png"; bbox 0 0 1200 800'
        )
    )
    assert len(root.findall(".//h:div[@class='ocr_carea']", ns)) == 3


def test_alto_reads_back_with_its_text_and_coordinates(tmp_path: Path) -> None:
    path = tmp_path / "page.xml"
    document = two_columns()
    path.write_bytes(render_bytes(document, "alto"))
    read = subprocess.run(
        [BIN / "alto-tools", "-t", str(path)], capture_output=True, text=True, check=True
    )
    assert [line.strip() for line in read.stdout.splitlines() if line.strip()] == [
        line.replace("中文abc", "中文 abc") for line in EXPECTED_LINES
    ]
    ns = {"a": "http://www.loc.gov/standards/alto/ns-v4#"}
    root = ET.parse(path).getroot()
    page = root.find(".//a:Page", ns)
    assert page is not None
    assert (page.get("WIDTH"), page.get("HEIGHT")) == ("1200", "800")
    strings = root.findall(".//a:String", ns)
    words = [word for line in document.pages[0].lines for word in line.words]
    assert len(strings) == len(words)
    for string, word in zip(strings, words, strict=True):
        x0, y0, x1, y1 = word.box
        assert string.get("CONTENT") == word.text
        assert [int(string.get(k, "-1")) for k in ("HPOS", "VPOS", "WIDTH", "HEIGHT")] == [
            x0,
            y0,
            x1 - x0,
            y1 - y0,
        ]


def _check_pdf(path: Path) -> None:
    checked = subprocess.run(["qpdf", "--check", str(path)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "No syntax or stream encoding errors" in checked.stdout
    with pikepdf.open(path) as pdf:
        assert len(pdf.pages) == 1


@needs_poppler
def test_pdf_words_whose_boxes_touch_stay_apart_and_a_cjk_run_stays_joined() -> None:
    # Recognised word boxes can touch: a text extractor guessing spaces from gaps read
    # "overthe". The text layer holds the line's own spaces, and only those.
    lines = [_line("jumps over the lazy dog", 60, 100, [120, 90, 70, 80, 70], gap=0)]
    page = Page(width=1200, height=800, blocks=group_blocks(lines))
    pdf = render_bytes(Document(name="touching.png", pages=(page,), source=None), "pdf")
    assert pdftotext(pdf, "-raw").split() == ["jumps", "over", "the", "lazy", "dog"]
    cjk = render_bytes(two_columns(), "pdf")
    assert "中文abc 结束" in pdftotext(cjk, "-raw")


@needs_poppler
@pytest.mark.parametrize(("kind", "encoding"), [("jpg", "jpeg"), ("png", "image")])
def test_pdf_from_an_image_keeps_it_and_its_words_sit_on_their_boxes(
    tmp_path: Path, kind: str, encoding: str
) -> None:
    data = _image(kind)
    media = "image/jpeg" if kind == "jpg" else "image/png"
    document = two_columns(Source(media, data))
    pdf = render_bytes(document, "pdf")
    path = tmp_path / "out.pdf"
    path.write_bytes(pdf)
    _check_pdf(path)
    ((*_, width, height, _color, _comp, _bpc, enc, _interp, _obj, _gen, xppi, _yppi, _, _),) = (
        pdfimages(path)
    )
    assert (int(width), int(height), enc) == (1200, 800, encoding)
    assert xppi == "300"  # no resolution in the file: 300 dpi assumed
    if kind == "jpg":  # embedded as sent: the JPEG's bytes are in the PDF unchanged
        with pikepdf.open(path) as opened:
            (image,) = opened.pages[0].get_images().values()
            assert image.read_raw_bytes() == data
    assert [line for line in pdftotext(pdf, "-raw").splitlines() if line.strip()] == (
        EXPECTED_LINES
    )
    # Each word found inside its box (points = pixels x 72 / 300), to a point.
    scale = 72 / 300
    boxes = [word.box for line in document.pages[0].lines for word in line.words]
    found = re.findall(
        r'<word xMin="([\d.]+)" yMin="([\d.]+)" xMax="([\d.]+)" yMax="([\d.]+)">(.*?)</word>',
        pdftotext(pdf, "-bbox"),
    )
    texts = [w.text for line in document.pages[0].lines for w in line.words]
    assert sorted(t for *_, t in found if t != "中文abc") == sorted(
        t for t in texts if t not in ("中文", "abc")
    )  # pdftotext -bbox has its own order, and joins words that touch
    for x0, y0, x1, y1, text in [f for f in found if f[-1] != "中文abc"]:
        centre = ((float(x0) + float(x1)) / 2 / scale, (float(y0) + float(y1)) / 2 / scale)
        assert any(b[0] <= centre[0] <= b[2] and b[1] <= centre[1] <= b[3] for b in boxes), (
            text,
            centre,
        )
        # Within a point of a box of a word with its text.
        assert any(
            float(x0) >= bx0 * scale - 1
            and float(x1) <= bx1 * scale + 1
            and float(y0) >= by0 * scale - 1
            and float(y1) <= by1 * scale + 1
            for (bx0, by0, bx1, by1), word in zip(boxes, texts, strict=True)
            if word == text
        ), (text, x0, y0, x1, y1)


@needs_poppler
def test_pdf_from_a_pdf_keeps_its_pages_and_grafts_the_text(tmp_path: Path) -> None:
    original = FPDF(unit="pt", format=(288, 192))  # 1200 x 800 px rendered at 300 dpi
    original.add_page()
    original.image(io.BytesIO(_image("jpg")), x=0, y=0, w=288, h=192)
    source = bytes(original.output())
    (tmp_path / "in.pdf").write_bytes(source)
    pdf = render_bytes(two_columns(Source("application/pdf", source)), "pdf")
    path = tmp_path / "out.pdf"
    path.write_bytes(pdf)
    _check_pdf(path)
    # The page's own image is still there, as it was: nothing re-rasterised.
    without_ids = [row[:10] + row[12:] for row in pdfimages(path)]
    assert without_ids == [row[:10] + row[12:] for row in pdfimages(tmp_path / "in.pdf")]
    with pikepdf.open(path) as out, pikepdf.open(tmp_path / "in.pdf") as before:
        assert out.pages[0].mediabox == before.pages[0].mediabox
    assert [line for line in pdftotext(pdf, "-raw").splitlines() if line.strip()] == (
        EXPECTED_LINES
    )


@needs_poppler
def test_pdf_without_a_source_has_blank_pages_with_the_text() -> None:
    pdf = render_bytes(two_columns(), "pdf")
    assert [line for line in pdftotext(pdf, "-raw").splitlines() if line.strip()] == (
        EXPECTED_LINES
    )


@needs_poppler
def test_pdf_of_a_truncated_jpeg_embeds_it_as_sent(tmp_path: Path) -> None:
    data = _image("jpg")
    truncated = data[: len(data) * 2 // 3]  # OpenCV decodes what is there, and so do viewers
    path = tmp_path / "out.pdf"
    path.write_bytes(render_bytes(two_columns(Source("image/jpeg", truncated)), "pdf"))
    with pikepdf.open(path) as opened:
        (image,) = opened.pages[0].get_images().values()
        assert image.read_raw_bytes() == truncated


@needs_poppler
def test_pdf_of_an_image_pillow_refuses_embeds_what_opencv_decoded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*args: object) -> None:
        raise OSError("cannot identify image file")

    monkeypatch.setattr(pdf_output, "_embed", refuse)
    path = tmp_path / "out.pdf"
    path.write_bytes(render_bytes(two_columns(Source("image/png", _image("png"))), "pdf"))
    ((*_, width, height, _c, _n, _b, enc, _i, _o, _g, _x, _y, _s, _r),) = pdfimages(path)
    assert (int(width), int(height), enc) == (1200, 800, "image")
    with pytest.raises(InvalidInput):
        render_bytes(two_columns(Source("image/png", b"not an image")), "pdf")


def test_pdf_of_a_pdf_qpdf_cannot_read_is_invalid_input() -> None:
    with pytest.raises(InvalidInput):
        render_bytes(two_columns(Source("application/pdf", b"%PDF-1.4 not really")), "pdf")


@needs_poppler
@pytest.mark.parametrize("rotate", [90, 180, 270])
def test_pdf_of_a_rotated_pdf_page_puts_the_words_where_they_are_shown(rotate: int) -> None:
    # The page as stored is 192 x 288 pt (or 288 x 192), shown turned by /Rotate: 288 x 192 pt,
    # as pdfium renders it for the OCR (1200 x 800 px at 300 dpi).
    stored = (192, 288) if rotate % 180 else (288, 192)
    original = FPDF(unit="pt", format=stored)
    original.add_page()
    original.rect(10, 10, 50, 50)
    with pikepdf.open(io.BytesIO(bytes(original.output()))) as pdf:
        pdf.pages[0].obj.Rotate = rotate
        buffer = io.BytesIO()
        pdf.save(buffer)
    document = two_columns(Source("application/pdf", buffer.getvalue()))
    pdf_bytes = render_bytes(document, "pdf")
    assert [line for line in pdftotext(pdf_bytes, "-raw").splitlines() if line.strip()] == (
        EXPECTED_LINES
    )
    found = re.findall(
        r'<word xMin="([\d.]+)" yMin="([\d.]+)" xMax="([\d.]+)" yMax="([\d.]+)">(.*?)</word>',
        pdftotext(pdf_bytes, "-bbox"),
    )
    scale = 72 / 300
    boxes = {w.text: w.box for line in document.pages[0].lines for w in line.words}
    for x0, _y0, _x1, y1, text in found:
        if text in ("Two", "columns", "结束"):  # words that occur once
            b = boxes[text]
            assert abs(float(x0) - b[0] * scale) < 1.5, (text, x0, b)
            assert abs(float(y1) - b[3] * scale) < 1.5, (text, y1, b)
