"""The searchable PDF's invisible text layer: where each line and word goes, and writing them.

Text extractors rebuild words and lines from the glyphs' positions: poppler (`pdftotext`'s
default mode), MuPDF (PyMuPDF's `get_text()`) and pdfminer.six each join glyphs on one baseline
into a line, and break words at a space character or a gap. So each line is laid as one straight
run of glyphs (issue 48):

- **Along the page's skew.** Every line is set on a baseline turned by the page's skew
  (`Page.skew`, estimated once from all its line boxes, `pipelines.skew`), through the line's own
  quad: the glyphs of one line share one baseline, and all lines of the page one direction, so
  an askew page's lines come out whole and in order; set level instead, word by word on each
  word's upright box, a line 2.5 degrees askew climbed a staircase of baselines and `pdftotext`
  interleaved it with its neighbours (58% CER). `LINE_LAYOUT` says which (measured in
  docs/outputs.md; "centre" lays each line level through its centre).
- **Its thickness as the font size** (the quad's extent across the skew), its baseline a fifth
  of that above the quad's lower side: a viewer's selection covers the printed line.
- **Words on their boxes, a space glyph between.** Each word spans its box's extent along the
  line, stretched (`Tz`) to it; where the line's text has a space, the word ends at least a fifth
  of the font size short of the next one and a space character fills the gap, which poppler,
  MuPDF and pdfminer all read as a word break (recognised boxes can touch: "overthe"). A line of
  Latin text ends with a space too, for extractors that join lines without looking.
- **Reading order.** Lines go into the content stream in the document's order (blocks, then
  lines), which `pdftotext -raw`, PyMuPDF and pdfminer keep.

The font is glyphless (`fonts/Occulta.ttf`) and the text invisible (render mode 3): nothing is
drawn. Coordinates here are fpdf2's: points, origin at the page's top left, y down.
"""

from __future__ import annotations

from dataclasses import dataclass

from fpdf import FPDF
from fpdf.enums import TextMode

from pipelines.words import is_cjk
from serving.outputs.baselines import Baseline, LineLayout, baseline
from serving.outputs.document import Line, Page

LINE_LAYOUT: LineLayout = "centre"
"""How a line is laid: along the page's skew through its quad ("skew"), or level through the
quad's centre ("centre")."""
WORD_GAP = 0.2
"""The least gap between two words of a line, in font sizes (poppler breaks words at 0.1)."""
MIN_SPACE = 0.05
"""The narrowest space glyph, in font sizes (words a recogniser boxed touching)."""


@dataclass(frozen=True, slots=True)
class PlacedWord:
    """A word on its line: its start and width along the baseline, and the space after it."""

    text: str
    start: float
    """From the line's origin along its baseline, in points."""
    width: float
    space: float
    """The width of the space glyph after it; 0.0: none (the next word follows unspaced)."""


@dataclass(frozen=True, slots=True)
class PlacedLine:
    """A line as laid: a baseline from `origin` at `angle_deg`, its words along it."""

    origin: tuple[float, float]
    angle_deg: float
    """Counter-clockwise from level, as the page's skew."""
    size: float
    """The font size, in points: the line's thickness."""
    words: tuple[PlacedWord, ...]


def place_line(
    line: Line, skew_deg: float, scale: tuple[float, float], layout: LineLayout | None = None
) -> PlacedLine | None:
    """Where `line` goes on a page of `scale` points per OCR pixel (x, y) whose skew is
    `skew_deg` (`serving.outputs.baselines`); None for a line without words."""
    if not line.words:
        return None
    base = baseline(line, skew_deg, scale, layout or LINE_LAYOUT)
    words = _place_words(line, base, scale)
    return PlacedLine(origin=base.origin, angle_deg=base.angle_deg, size=base.size, words=words)


def _place_words(line: Line, base: Baseline, scale: tuple[float, float]) -> tuple[PlacedWord, ...]:
    """The line's words along its baseline, apart where its text has a space."""
    sx, sy = scale
    size = base.size
    spans = []
    for word in line.words:
        x0, y0, x1, y1 = word.box
        start, end = base.span(x0 * sx, y0 * sy, x1 * sx, y1 * sy)
        spans.append([start, end])
    spaced = _spaced(line)
    placed = []
    for i, (word, (start, end)) in enumerate(zip(line.words, spans, strict=True)):
        if i + 1 < len(spans):
            following = max(spans[i + 1][0], start + (end - start) / 2)
            spans[i + 1][0] = following
            if spaced[i]:
                # A word ends a fifth of the font size short of the next, a space glyph between.
                end = max(min(end, following - WORD_GAP * size), start + (end - start) / 2)
                space = max(following - end, MIN_SPACE * size)
            else:
                end = max(min(end, following), start + (end - start) / 2)
                space = 0.0
        else:
            space = 0.0 if is_cjk(word.text[-1]) else MIN_SPACE * size * 4
        placed.append(PlacedWord(text=word.text, start=start, width=end - start, space=space))
    return tuple(placed)


def _spaced(line: Line) -> list[bool]:
    """Per word of `line`, whether the line's text has a space after it (a CJK run and the
    Latin word right after it are two words with none between them)."""
    spaced = []
    position = 0
    for word in line.words:
        found = line.text.find(word.text, position)
        position = position if found < 0 else found + len(word.text)
        spaced.append(found < 0 or line.text[position : position + 1] == " ")
    return spaced


def write_layer(pdf: FPDF, page: Page, scale: tuple[float, float], font: str) -> None:
    """`page`'s lines, invisible, in reading order, on fpdf2's current page (`scale`: points per
    OCR pixel, x and y) in the font named `font`."""
    pdf.text_mode = TextMode.INVISIBLE
    for line in page.lines:
        placed = place_line(line, page.skew, scale)
        if placed is not None:
            _write_line(pdf, placed, font)
    pdf.set_stretching(100)
    pdf.text_mode = TextMode.FILL


def _write_line(pdf: FPDF, line: PlacedLine, font: str) -> None:
    pdf.set_font(font, size=line.size)
    x, y = line.origin
    if abs(line.angle_deg) < 0.005:
        _write_words(pdf, line, x, y)
        return
    with pdf.rotation(line.angle_deg, x=x, y=y):  # fpdf2's local state: restored after
        _write_words(pdf, line, x, y)


def _write_words(pdf: FPDF, line: PlacedLine, x: float, y: float) -> None:
    for word in line.words:
        _stretched(pdf, word.text, x + word.start, y, word.width)
        if word.space > 0:
            _stretched(pdf, " ", x + word.start + word.width, y, word.space)


def _stretched(pdf: FPDF, text: str, x: float, baseline: float, width: float) -> None:
    """`text` at (x, baseline) in the current font, stretched horizontally to `width`."""
    pdf.set_stretching(100)
    natural = pdf.get_string_width(text)
    if natural <= 0:
        return
    pdf.set_stretching(100 * width / natural)
    pdf.text(x, baseline, text)
