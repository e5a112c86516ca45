"""The plugin's engine without a server: the `/v1/ocr` JSON as OCRmyPDF's `OcrElement` tree, the
language names, and which runs it takes (the real `ocrmypdf`: tests/e2e/test_ocrmypdf_plugin.py)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from ocrmypdf import OcrClass
from ocrmypdf.hocrtransform import BoundingBox

import serving.ocrmypdf_plugin as plugin
from serving.ocrmypdf_plugin import engine
from serving.ocrmypdf_plugin.engine import (
    ServingOcrEngine,
    hug_ink,
    paddle_lang,
    page_elements,
    page_skew,
)

pytestmark = pytest.mark.unit


def _line(text: str, x: int, y: int) -> dict[str, Any]:
    words = []
    for i, word in enumerate(text.split()):
        words.append({"text": word, "box": [x + 50 * i, y, x + 50 * i + 40, y + 20], "score": 0.9})
    return {
        "text": text,
        "score": 0.95,
        "box": [[x, y], [x + 200, y], [x + 200, y + 20], [x, y + 20]],
        "words": words,
    }


PAGE = {
    "width": 500,
    "height": 400,
    # PaddleOCR's order: the right column's line first; the blocks give reading order.
    "lines": [_line("right column", 300, 10), _line("left one", 10, 10), _line("left two", 10, 40)],
    "blocks": [
        {"box": [10, 10, 210, 60], "lines": [1, 2]},
        {"box": [300, 10, 500, 30], "lines": [0]},
    ],
}


def test_blocks_become_paragraphs_in_reading_order_with_word_boxes() -> None:
    root, text = page_elements(PAGE, (500, 400), 150.0, 3)
    assert root.ocr_class == OcrClass.PAGE
    assert (root.dpi, root.page_number) == (150.0, 3)
    assert [p.ocr_class for p in root.children] == [OcrClass.PARAGRAPH] * 2
    assert [[line.text for line in p.children] for p in root.children] == [
        ["left one", "left two"],
        ["right column"],
    ]
    word = root.children[0].children[0].children[1]
    assert (word.ocr_class, word.text, word.confidence) == (OcrClass.WORD, "one", 90.0)
    assert word.bbox is not None
    assert (word.bbox.left, word.bbox.top, word.bbox.right, word.bbox.bottom) == (60, 10, 100, 30)
    assert text == "left one\nleft two\n\nright column\n"


def test_a_page_read_scaled_down_is_scaled_back_to_the_image_sent() -> None:
    root, _ = page_elements(PAGE, (1000, 800), 300.0, 0)
    word = root.children[1].children[0].children[0]
    assert word.bbox is not None
    assert (word.bbox.left, word.bbox.top, word.bbox.right, word.bbox.bottom) == (600, 20, 680, 60)


def test_an_empty_page_is_an_empty_tree() -> None:
    root, text = page_elements({"width": 5, "height": 5, "lines": []}, (5, 5), 72.0, 0)
    assert (root.children, text) == ([], "")


def test_tesseract_language_names_map_to_ours() -> None:
    assert paddle_lang(["eng"]) == "en"
    assert paddle_lang(["fra", "eng"]) == "fr"
    assert paddle_lang(["chi_sim"]) == "ch"
    assert paddle_lang(["fr"]) == "fr"


@pytest.mark.parametrize(
    ("engine", "ours"), [("auto", True), ("tesseract", False), ("none", False)]
)
def test_only_auto_selects_our_engine(engine: str, ours: bool) -> None:
    options = SimpleNamespace(ocr_engine=engine)
    assert isinstance(plugin.get_ocr_engine(options), ServingOcrEngine) is ours
    assert plugin.get_ocr_engine(None) is None


def test_languages_are_the_servers_under_both_names(monkeypatch: pytest.MonkeyPatch) -> None:
    class Served:
        def languages(self) -> set[str]:
            return {"en", "fr", "ch"}

    monkeypatch.setattr(engine, "backend_for", lambda options: Served())
    names = ServingOcrEngine.languages(SimpleNamespace())  # type: ignore[arg-type]
    assert {"en", "eng", "fr", "fra", "ch", "chi_sim"} <= set(names)
    assert "deu" not in names


def test_word_boxes_hug_their_ink_and_never_grow() -> None:
    gray = np.full((40, 100), 255, np.uint8)
    gray[10:30, 20:50] = 0  # a word's ink
    box = BoundingBox(left=12, top=5, right=60, bottom=35)
    hugged = hug_ink(gray, box)
    assert (hugged.left, hugged.top, hugged.right, hugged.bottom) == (20, 5, 50, 35)
    assert hug_ink(gray, BoundingBox(left=25, top=5, right=40, bottom=35)).left == 25
    blank = BoundingBox(left=60, top=5, right=90, bottom=35)
    assert hug_ink(gray, blank) == blank  # no ink: as the server placed it
    assert hug_ink(None, box) == box


def test_on_an_askew_page_only_the_words_own_line_counts_as_its_ink() -> None:
    """The upright box of a word on a sloping line holds the ends of the lines above and below;
    their ink must not widen it back over the gap to the next word."""
    gray = np.full((60, 120), 255, np.uint8)
    gray[25:35, 30:70] = 0  # the word, on its line's band (rows 20 to 40)
    gray[2:12, 0:120] = 0  # the line above, across the whole box
    box = BoundingBox(left=10, top=0, right=100, bottom=60)
    quad = np.array([[0, 20], [120, 20], [120, 40], [0, 40]], dtype=float)
    hugged = hug_ink(gray, box, quad)
    assert (hugged.left, hugged.right) == (30, 70)
    assert (hug_ink(gray, box).left, hug_ink(gray, box).right) == (10, 100)  # without the quad


def test_words_on_an_askew_line_are_set_apart_as_our_pdfs_set_them() -> None:
    """Upright boxes of words on a line 4 degrees askew overlap by the slant of the line's
    thickness; OCRmyPDF stretches each word to its box, and pdftotext read "willusually"."""
    turn = np.radians(4.0)
    along, down = np.array([np.cos(turn), -np.sin(turn)]), np.array([np.sin(turn), np.cos(turn)])
    start = np.array([100.0, 300.0])
    quad = [start, start + 400 * along, start + 400 * along + 30 * down, start + 30 * down]
    words = []
    for text, a, b in (("will", 0, 100), ("usually", 101, 400)):
        corners = [start + t * along + d * down for t in (a, b) for d in (0, 30)]
        xs, ys = [c[0] for c in corners], [c[1] for c in corners]
        words.append({"text": text, "box": [min(xs), min(ys), max(xs), max(ys)], "score": 0.9})
    assert words[0]["box"][2] > words[1]["box"][0]  # the upright boxes overlap
    line = {"text": "will usually", "score": 0.9, "box": [p.tolist() for p in quad], "words": words}
    page = {"width": 600, "height": 600, "skew": 4.0, "lines": [line], "blocks": [{"lines": [0]}]}
    root, text = page_elements(page, (600, 600), 72.0, 0)
    (element,) = root.lines
    will, usually = element.children
    assert will.bbox.right < usually.bbox.left  # apart: a gap for the space
    assert text == "will usually\n"


def _quad(x: float, y: float, length: float, degrees: float, height: float = 20) -> dict[str, Any]:
    """A line's box turned `degrees` clockwise on the page (y down), corners clockwise."""
    rad = np.radians(degrees)
    along = np.array([np.cos(rad), np.sin(rad)]) * length
    down = np.array([-np.sin(rad), np.cos(rad)]) * height
    p0 = np.array([x, y])
    corners = [p0, p0 + along, p0 + along + down, p0 + down]
    return {"box": [c.tolist() for c in corners]}


def test_deskew_undoes_the_servers_skew_or_the_lines_slope() -> None:
    """OCRmyPDF turns the image by `get_deskew`'s angle (counter-clockwise): the page's skew,
    undone. A server that reports `skew` is taken at its word; an older one's lines are
    measured (`pipelines.skew`)."""
    lines = [_quad(10, 10 + 30 * i, 600, 2.0) for i in range(5)]  # turned clockwise
    lines.append(_quad(10, 500, 40, 30.0))  # a short line: not counted
    assert page_skew({"lines": lines}) == pytest.approx(-2.0)
    assert page_skew({"lines": lines, "skew": 1.25}) == 1.25
    assert page_skew({"lines": []}) == 0.0
