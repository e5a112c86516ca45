"""A document's OCR as the output formats read it: pages of blocks of lines of words, in reading
order, and the original upload the PDF writer builds on.

Built from a request's page results (`page_from_result`) or from the native `/v1/ocr` JSON of a
page (`page_from_json`: stored job results are rendered later from it). Coordinates are the OCR
page's pixels, origin top left.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

import numpy as np

from pipelines.layout import LayoutParams, reading_order
from pipelines.page import to_upright_page
from pipelines.page_orientation import sent_size, to_sent_box, to_sent_points
from pipelines.skew import estimate_skew, level_boxes
from pipelines.types import PageResult, TextLine
from pipelines.words import Box, Word

__all__ = [
    "Block",
    "Box",
    "Document",
    "Line",
    "Page",
    "Source",
    "Word",
    "page_from_json",
    "page_from_result",
    "page_json",
]


@dataclass(frozen=True, slots=True)
class Line:
    """One recognised line."""

    text: str
    score: float
    poly: tuple[tuple[int, int], ...]
    """The detected quad, TL, TR, BR, BL."""
    box: Box
    """The quad's axis-aligned bounds."""
    words: tuple[Word, ...]
    """The line's words with their boxes; one word spanning the line when the recogniser's
    alignment was not kept."""


@dataclass(frozen=True, slots=True)
class Block:
    """Lines read together (a paragraph, or a column's run of lines), in reading order."""

    box: Box
    lines: tuple[Line, ...]


@dataclass(frozen=True, slots=True)
class Page:
    """One page: its size in pixels and its blocks in reading order."""

    width: int
    height: int
    blocks: tuple[Block, ...]
    index: int = 0
    """The page's position in its document (0-based)."""
    turn: int = 0
    """Degrees the page as sent is turned counter-clockwise to be read (the page classifier's
    angle, `pipelines.page_orientation`): `width`, `height` and every box are then the upright
    page's, as a reader sees it; the PDF writer shows the page so."""
    skew: float = 0.0
    """How far the page's lines are turned from level, degrees counter-clockwise
    (`pipelines.skew`): what the text layers' baselines follow, and what `Document.deskew`
    turns the page back by."""

    @property
    def lines(self) -> tuple[Line, ...]:
        """Every line, in reading order."""
        return tuple(line for block in self.blocks for line in block.lines)


@dataclass(frozen=True, slots=True)
class Source:
    """The original upload: what the PDF writer embeds (images as sent, PDF pages as they are)."""

    media_type: str
    """`application/pdf`, or the image's type (`image/jpeg`, `image/png`, ...)."""
    data: bytes | None = None
    path: str | None = None
    """Where the file lies instead of `data` (a batch job's stored upload)."""

    def read(self) -> bytes:
        """The file's bytes."""
        if self.data is not None:
            return self.data
        if self.path is None:
            raise ValueError("a source needs its data or its path")
        with open(self.path, "rb") as file:
            return file.read()


TextMode = Literal["skip", "force", "redo"]
"""What a searchable PDF does with a PDF's pages that have text (`serving.outputs.pdf_text`)."""
TEXT_MODES: Final[tuple[TextMode, ...]] = ("skip", "force", "redo")


@dataclass(frozen=True, slots=True)
class Document:
    """One uploaded document's OCR."""

    name: str
    """The upload's file name, without a directory (a title in hOCR and ALTO)."""
    pages: tuple[Page, ...]
    source: Source | None = None
    """None: the PDF output has its text only, on blank pages of the OCR pages' size."""
    mode: TextMode = "skip"
    """What the PDF output does with pages of a PDF source that have text already: skip them,
    force the OCR layer over them, or redo their earlier OCR layer (`serving.outputs.pdf_text`)."""
    deskew: bool = False
    """The PDF output shows each page straightened (turned back by its `skew`), its text layer
    with it (`serving.outputs.deskew`), as OCRmyPDF's `--deskew`."""


def _bounds(points: np.ndarray) -> Box:
    xs, ys = points[..., 0], points[..., 1]
    return (int(xs.min()), int(ys.min()), int(xs.max()), int(ys.max()))


def _union(boxes: Sequence[Box]) -> Box:
    return (
        min(b[0] for b in boxes),
        min(b[1] for b in boxes),
        max(b[2] for b in boxes),
        max(b[3] for b in boxes),
    )


def make_line(text: str, score: float, poly: Any, words: Sequence[Word] = ()) -> Line:
    """A line from its quad and its words; without words (results stored before words were
    kept), the whole line is one word on the line's box."""
    quad = np.asarray(poly, dtype=np.int64).reshape(4, 2)
    box = _bounds(quad)
    kept = tuple(words) or ((Word(text=text, box=box, score=score),) if text.strip() else ())
    return Line(
        text=text,
        score=score,
        poly=tuple((int(x), int(y)) for x, y in quad),
        box=box,
        words=kept,
    )


def group_blocks(
    lines: Sequence[Line], blocks: Sequence[Sequence[int]] | None = None, skew: float = 0.0
) -> tuple[Block, ...]:
    """Lines into blocks: the given blocks (indices into `lines`, in reading order), or those
    `pipelines.layout.reading_order` finds on the page levelled by its `skew`."""
    if blocks is None:
        blocks = reading_order(level_boxes([line.poly for line in lines], skew), LayoutParams())
    return tuple(
        Block(box=_union([lines[i].box for i in members]), lines=tuple(lines[i] for i in members))
        for members in blocks
        if members
    )


def page_from_result(
    result: PageResult,
    index: int = 0,
    sent: tuple[int, int] | None = None,
    blocks: Sequence[Sequence[int]] | None = None,
) -> Page:
    """A page from the pipeline's result, its lines in reading order (`blocks`, from
    `reading_orders`, else found here); with `sent` (the page's (width, height) as sent, when it
    was decoded smaller), in the sent page's pixels."""
    turn = result.page_orientation.applied if result.page_orientation is not None else 0
    if turn:  # the page as a reader sees it: upright
        result = to_upright_page(result)
        if sent is not None and turn % 180:
            sent = (sent[1], sent[0])
    lines = [
        make_line(line.text, float(line.score), line.poly, line.words) for line in result.lines
    ]
    page = Page(
        width=result.width,
        height=result.height,
        blocks=group_blocks(lines, blocks, result.skew),
        index=index,
        turn=turn,
        skew=result.skew,
    )
    return page if sent is None else scale_page(page, *sent)


def scale_page(page: Page, width: int, height: int) -> Page:
    """The page with every coordinate scaled to a page of `width` x `height` pixels."""
    sx, sy = width / max(page.width, 1), height / max(page.height, 1)

    def box(b: Box) -> Box:
        return (round(b[0] * sx), round(b[1] * sy), round(b[2] * sx), round(b[3] * sy))

    blocks = tuple(
        Block(
            box=box(block.box),
            lines=tuple(
                Line(
                    text=line.text,
                    score=line.score,
                    poly=tuple((round(x * sx), round(y * sy)) for x, y in line.poly),
                    box=box(line.box),
                    words=tuple(Word(w.text, box(w.box), w.score) for w in line.words),
                )
                for line in block.lines
            ),
        )
        for block in page.blocks
    )
    return dataclasses.replace(page, width=width, height=height, blocks=blocks)


def page_from_json(page: Mapping[str, Any], index: int | None = None) -> Page:
    """A page from the native `/v1/ocr` JSON of one page (`page_json`): its `blocks` when it has
    them, else the reading order computed again; its lines' `words` when they have them.

    Raises:
        ValueError: the JSON is not a native page.
    """
    try:
        width, height = int(page["width"]), int(page["height"])
        found = page.get("orientation") or {}
        turn = int(found["angle"]) if found.get("turned") else 0
        back = (360 - turn) % 360  # the page as sent to the page as read: upright

        def upright_box(box: Any) -> Box:
            return to_sent_box(_box(box), back, width, height) if turn else _box(box)

        lines = [
            make_line(
                str(line["text"]),
                float(line["score"]),
                to_sent_points(np.asarray(line["box"]), back, width, height)
                if turn
                else line["box"],
                [
                    Word(text=str(w["text"]), box=upright_box(w["box"]), score=float(w["score"]))
                    for w in line.get("words") or ()
                ],
            )
            for line in page["lines"]
        ]
        width, height = sent_size(back, width, height)
        blocks = [list(block["lines"]) for block in page["blocks"]] if "blocks" in page else None
        stored = page.get("skew")  # results stored before it was reported: from the line boxes
        skew = float(stored) if stored is not None else estimate_skew([ln.poly for ln in lines])
        return Page(
            width=width,
            height=height,
            blocks=group_blocks(lines, blocks, skew),
            index=int(page.get("page", 0)) if index is None else index,
            turn=turn,
            skew=skew,
        )
    except (KeyError, TypeError, IndexError, ValueError) as err:
        raise ValueError(f"not a native OCR page: {err!r}") from err


def _box(value: Any) -> Box:
    x0, y0, x1, y1 = (int(v) for v in value)
    return (x0, y0, x1, y1)


def page_json(
    result: PageResult,
    *,
    words: bool = False,
    layout: bool = False,
    blocks: Sequence[Sequence[int]] | None = None,
) -> dict[str, Any]:
    """The lines of a page as `/v1/ocr` answers them (PaddleOCR's order), with each line's words
    when `words`, and the page's `blocks` in reading order (indices into `lines`) when `layout`:
    `blocks` (from `reading_orders`), else found here.
    """
    body: dict[str, Any] = {
        "width": result.width,
        "height": result.height,
        "skew": result.skew,
        "lines": [
            {
                "text": line.text,
                "score": float(line.score),
                "box": line.poly.tolist(),
                **({"words": _words_json(line)} if words else {}),
            }
            for line in result.lines
        ],
        **orientation_json(result),
    }
    if layout:
        boxes = [_bounds(np.asarray(line.poly).reshape(4, 2)) for line in result.lines]
        order = reading_orders([result])[0] if blocks is None else blocks
        body["blocks"] = [
            {"box": list(_union([boxes[i] for i in members])), "lines": members}
            for members in order
        ]
    return body


def reading_orders(results: Sequence[PageResult]) -> list[list[list[int]]]:
    """Each page's blocks in reading order (`pipelines.layout.reading_order` on its lines' boxes),
    for `page_json` and `page_from_result`: a CPU worker runs it (`Renderer.reading_orders`). A
    page read turned is ordered as a reader sees it, upright (`to_upright_page`), and a page
    scanned askew as it reads levelled (`pipelines.skew.level_boxes`)."""
    return [
        reading_order(
            level_boxes([line.poly for line in to_upright_page(result).lines], result.skew)
        )
        for result in results
    ]


def orientation_json(result: PageResult) -> dict[str, Any]:
    """`{"orientation": {"angle", "score", "turned"}}` where the page-orientation classifier ran
    (`angle`: its class, the page's counter-clockwise turn to upright; `turned`: whether the page
    was read turned, boxes staying in the page as sent), else {}."""
    found = result.page_orientation
    if found is None:
        return {}
    return {
        "orientation": {
            "angle": found.angle,
            "score": round(float(found.score), 4),
            "turned": found.turned,
        }
    }


def _words_json(line: TextLine) -> list[dict[str, Any]]:
    built = make_line(line.text, float(line.score), line.poly, line.words)
    return [{"text": w.text, "box": list(w.box), "score": w.score} for w in built.words]


_MAGIC = (
    (b"%PDF", "application/pdf"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"II*\x00", "image/tiff"),
    (b"MM\x00*", "image/tiff"),
    (b"GIF8", "image/gif"),
    (b"BM", "image/bmp"),
)


def media_type_of(data: bytes, pdf: bool = False) -> str:
    """An upload's media type from its first bytes ("application/pdf" when `pdf`)."""
    if pdf:
        return "application/pdf"
    for magic, media_type in _MAGIC:
        if data.startswith(magic):
            return media_type
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return "application/octet-stream"
