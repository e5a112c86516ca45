"""Text layers of a page whose lines are askew (issue 48), written by hand with known geometry:
where the baselines go (`serving.outputs.baselines`), the PDF's lines and words
(`serving.outputs.pdf_layer`) read back by poppler, PyMuPDF and pdfminer.six, the page
straightened (`serving.outputs.deskew`), hOCR's baselines and ALTO's rotation; and the reading
order of askew lines. Real pages: tests/e2e/test_text_layers.py."""

from __future__ import annotations

import io
import itertools
import math
import re
import xml.etree.ElementTree as ET

import numpy as np
import pikepdf
import pytest

from loadtest.accuracy import cer
from loadtest.text_layers import extract
from pipelines.skew import estimate_skew, level_boxes
from pipelines.words import Word
from serving.outputs import alto, hocr
from serving.outputs.baselines import baseline
from serving.outputs.deskew import levelled
from serving.outputs.document import Document, Line, Page, Source, group_blocks, make_line
from serving.outputs.formats import render_bytes
from serving.outputs.pdf_layer import place_line
from tests.images import make_pdf
from tests.poppler import needs_poppler

pytestmark = pytest.mark.unit

SKEW = 3.0
"""The page's lines rise 3 degrees to the right (counter-clockwise)."""
PARAGRAPH = [
    "Read this first",
    "so each one stays apart when a search looks for it",
    "and the lines of this paragraph keep their order too",
    "even though the page was laid crooked on the scanner",
]


def _askew_line(text: str, x: float, y: float, skew: float = SKEW, height: float = 24) -> Line:
    """`text` from (x, y) (the top left of its first word) rising `skew` degrees, its words
    17 px a letter and 12 px apart, each with the upright box around its slanted extent."""
    turn = math.radians(skew)
    along = np.array([math.cos(turn), -math.sin(turn)])
    down = np.array([math.sin(turn), math.cos(turn)]) * height
    start = np.array([x, y])
    words, at = [], 0.0
    for word in text.split():
        length = 17 * len(word)
        corners = [start + along * a + d for a in (at, at + length) for d in (0 * down, down)]
        xs, ys = [c[0] for c in corners], [c[1] for c in corners]
        words.append(Word(word, (int(min(xs)), int(min(ys)), int(max(xs)), int(max(ys))), 0.9))
        at += length + 12
    end = start + along * (at - 12)
    quad = [start, end, end + down, start + down]
    return make_line(text, 0.9, [[float(v) for v in p] for p in quad], words)


def _askew_lines(skew: float = SKEW, pitch: float = 32) -> list[Line]:
    """The paragraph, its short first line indented."""
    return [
        _askew_line(text, 140 if i == 0 else 100, 200 + pitch * i, skew)
        for i, text in enumerate(PARAGRAPH)
    ]


def _askew_page(skew: float = SKEW) -> Page:
    lines = _askew_lines(skew)
    page_skew = estimate_skew([line.poly for line in lines])
    return Page(width=1400, height=600, blocks=group_blocks(lines, None, page_skew), skew=page_skew)


def test_the_lines_own_skew_is_found_and_their_order_kept() -> None:
    page = _askew_page()
    assert page.skew == pytest.approx(SKEW, abs=0.1)
    assert [line.text for line in page.lines] == PARAGRAPH
    # Sorted by their upright boxes (taller than the line pitch), they interleaved.
    upright = group_blocks(_askew_lines())
    assert [line.text for block in upright for line in block.lines] != PARAGRAPH


def test_level_boxes_turn_the_quads_level() -> None:
    page = _askew_page()
    boxes = level_boxes([line.poly for line in page.lines], page.skew)
    heights = boxes[:, 3] - boxes[:, 1]
    assert heights == pytest.approx([24] * 4, abs=2)  # the line's thickness, not its rise


@pytest.mark.parametrize("index", [0, 1])
def test_a_line_is_laid_level_through_its_middle_its_thickness_tall(index: int) -> None:
    """Its thickness, and half its rise (at most half its thickness) so that a viewer's selection
    of its end words reaches their print: the short first line, and a long one."""
    line = _askew_page().lines[index]
    placed = place_line(line, SKEW, (1.0, 1.0))
    assert placed is not None
    assert placed.angle_deg == 0.0
    rise = (line.box[2] - line.box[0]) * math.tan(math.radians(SKEW)) / 2
    assert placed.size == pytest.approx(24 + min(rise, 12), abs=1)
    quad = np.asarray(line.poly, dtype=float)
    middle = quad[:, 1].mean()
    # The em box (baseline a fifth of the size up from its bottom) centred on the quad.
    assert placed.origin[1] - 0.3 * placed.size == pytest.approx(middle, abs=1)
    # Words in order, apart, a space glyph between each two (none after a line's CJK end).
    ends = [(w.start, w.start + w.width) for w in placed.words]
    assert all(a[1] < b[0] for a, b in itertools.pairwise(ends))
    assert all(w.space > 0 for w in placed.words)
    skewed = place_line(line, SKEW, (1.0, 1.0), "skew")
    assert skewed is not None
    assert skewed.angle_deg == pytest.approx(SKEW, abs=0.1)
    assert skewed.size == pytest.approx(24, abs=1)


def test_baselines_follow_the_skew_and_a_sideways_line_its_own_angle() -> None:
    line = _askew_line("upright text on an askew page", 100, 300)
    base = baseline(line, SKEW)
    assert base.angle_deg == pytest.approx(SKEW, abs=0.01)
    (x0, y0), (x1, y1) = base.origin, base.end
    assert (y0 - y1) / (x1 - x0) == pytest.approx(math.tan(math.radians(SKEW)), abs=1e-3)
    sideways = _askew_line("a caption set sideways", 50, 500, skew=90.0)
    assert baseline(sideways, SKEW).angle_deg == pytest.approx(90.0, abs=0.5)


@needs_poppler
@pytest.mark.parametrize("skew", [-4.0, 2.5])
def test_askew_pdf_reads_whole_lines_in_order_with_every_tool(skew: float) -> None:
    page = _askew_page(skew)
    pdf = render_bytes(Document(name="askew.png", pages=(page,)), "pdf")
    ours = "\n".join(PARAGRAPH)
    for tool in ("pdftotext", "pdftotext-raw", "pymupdf", "pdfminer"):
        (text,) = extract(pdf, tool)
        lines = [" ".join(line.split()) for line in text.splitlines() if line.strip()]
        assert lines == PARAGRAPH, (tool, text)
        assert cer(ours, text) == 0.0


@needs_poppler
def test_deskew_levels_the_words_onto_their_lines() -> None:
    page = _askew_page()
    level = levelled(page)
    assert level.skew == 0.0
    for line in level.lines:
        tops = {word.box[1] for word in line.words}
        assert len(tops) == 1  # every word on the line's band
        assert line.box[3] - line.box[1] == pytest.approx(24, abs=2)
    # The words keep their order and stay apart along the line.
    first = level.lines[0].words
    assert all(a.box[2] <= b.box[0] for a, b in itertools.pairwise(first))
    pdf = render_bytes(Document(name="askew.png", pages=(page,), deskew=True), "pdf")
    (text,) = extract(pdf, "pdftotext")
    assert [" ".join(line.split()) for line in text.splitlines() if line.strip()] == PARAGRAPH
    assert levelled(level) is level  # a level page is left as it is


def test_hocr_baselines_slope_with_the_skew() -> None:
    page = _askew_page()
    document = Document(name="askew.png", pages=(page,))
    root = ET.fromstring(b"".join(hocr.render(document)).decode().split("\n", 2)[2])
    ns = {"h": "http://www.w3.org/1999/xhtml"}
    lines = root.findall(".//h:span[@class='ocr_line']", ns)
    assert len(lines) == len(PARAGRAPH)
    for element, _line in zip(lines, page.lines, strict=True):
        match = re.search(r"baseline (\S+) (\S+)", element.get("title", ""))
        assert match is not None
        slope, offset = float(match.group(1)), float(match.group(2))
        assert slope == pytest.approx(-math.tan(math.radians(page.skew)), abs=1e-3)
        # At the box's left edge a rising line's baseline is near its box's bottom.
        assert -0.35 * 24 <= offset <= 0
        assert "textangle" not in element.get("title", "")
    sideways = _askew_line("a caption set sideways", 50, 500, skew=90.0)
    assert "textangle 90" in hocr.line_title(sideways, page.skew)


def test_alto_has_the_rotation_and_each_lines_baseline() -> None:
    page = _askew_page()
    root = ET.fromstring(b"".join(alto.render(Document(name="a.png", pages=(page,)))))
    ns = {"a": alto.NAMESPACE}
    (element,) = root.findall(".//a:Page", ns)
    assert float(element.get("ROTATION", "nan")) == page.skew
    assert {b.get("ROTATION") for b in root.findall(".//a:TextBlock", ns)} == {f"{page.skew:g}"}
    for text_line, line in zip(root.findall(".//a:TextLine", ns), page.lines, strict=True):
        start, end = (tuple(map(int, p.split(","))) for p in text_line.get("BASELINE", "").split())
        assert start[0] == pytest.approx(line.box[0], abs=2)
        assert end[0] == pytest.approx(line.box[2], abs=2)
        assert start[1] - end[1] == pytest.approx(
            (end[0] - start[0]) * math.tan(math.radians(page.skew)), abs=1.5
        )
    level = Page(width=100, height=100, blocks=())
    level_root = ET.fromstring(b"".join(alto.render(Document(name="b.png", pages=(level,)))))
    assert level_root.find(".//a:Page", ns).get("ROTATION") is None  # type: ignore[union-attr]


@needs_poppler
def test_deskew_turns_a_pdf_pages_content_and_lays_its_text_level() -> None:
    page = _askew_page()
    original = make_pdf([np.full((600, 1400, 3), 255, np.uint8)], dpi=144.0)
    document = Document(
        name="askew.pdf", pages=(page,), source=Source("application/pdf", original), deskew=True
    )
    pdf = render_bytes(document, "pdf")
    with pikepdf.open(io.BytesIO(pdf)) as opened:
        first = next(
            op
            for op in pikepdf.parse_content_stream(opened.pages[0])
            if isinstance(op, pikepdf.ContentStreamInstruction) and str(op.operator) == "cm"
        )
        a, b = float(first.operands[0]), float(first.operands[1])
    assert math.degrees(math.atan2(b, a)) == pytest.approx(-page.skew, abs=0.01)
    (text,) = extract(pdf, "pdftotext")
    assert [" ".join(line.split()) for line in text.splitlines() if line.strip()] == PARAGRAPH
