"""Lines grouped into blocks (paragraphs) and the blocks put in the order a reader reads them.

Recursive XY-cut on the lines' boxes (Nagy and Seth, 1984): a region's lines are projected onto
the y axis and onto the x axis; an empty band across the whole region is a cut: a horizontal one
(a gap between lines at least `paragraph_gap` line heights tall) separates blocks above from
blocks below, a vertical one (a gutter at least `column_gap` line heights wide) separates columns
left to right. The widest cut, measured in line heights, is made first and each side is cut
again; a region with no cut left is one block, its lines top to bottom and, on one row, left to
right. A title across two columns is cut off above them first (no vertical gutter crosses it),
then the columns apart, then each column into paragraphs: the text reads column by column, where
PaddleOCR's order (top to bottom, then left to right) interleaves the columns' lines.

Page furniture is read first and last: the page's top row of lines (a running header, a page
number) when an empty band at least `furniture_gap` line heights tall parts it from the body is
the first block, and the bottom row so parted (a footer) the last; the XY-cut orders the body
between. Left to the XY-cut, a header at the top right, beside nothing but the heading below it,
was a column of its own and read after that heading (issue 39, item 7: a born-digital page's
"Shared MIME-info Database" after "1.3. Language used in this specification").

The cuts are made with an explicit stack, not recursion (a page of ~1,000 stacked lines, each cut
off the rest alone, once passed Python's recursion limit: a 500), each region's projections in
numpy, and the work is bounded: once `MAX_WORK` line visits have been spent on a page, the regions
still uncut are each one block, in rows. Pure functions over boxes: no image, no model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

Box = tuple[int, int, int, int]
"""x0, y0, x1, y1."""

MAX_WORK = 2_000_000
"""Lines visited while looking for cuts, all regions of a page together: 2,000 lines each cut off
alone (the worst case, quadratic) fit, in ~0.1 s here; a page's few hundred lines take a few ms."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LayoutParams:
    """How wide an empty band must be, in median line heights, to cut a region."""

    paragraph_gap: float = 0.8
    """Between lines above and below: a smaller gap is line spacing within a paragraph."""
    column_gap: float = 1.0
    """Between columns: wider than the space between two words of a line."""
    furniture_gap: float = 0.8
    """Between the page's top (bottom) row and the rest: that row is a header (footer), read
    first (last). A paragraph's gap: the Shared MIME-info spec's running header is 0.96 line
    heights above its heading as the detector boxes them (the text layer's boxes: 1.4)."""


def reading_order(
    boxes: Sequence[Box] | np.ndarray, params: LayoutParams | None = None
) -> list[list[int]]:
    """The lines' blocks in reading order.

    Args:
        boxes: One (x0, y0, x1, y1) per line, in any order.
        params: Cut thresholds; the defaults when None.

    Returns:
        Blocks, each a list of indices into `boxes` in reading order; every line in exactly one.
    """
    params = params or LayoutParams()
    array = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    if len(array) == 0:
        return []
    heights = array[:, 3] - array[:, 1]
    line_height = max(float(np.median(heights)), 1.0)
    header, body, footer = _furniture(array, line_height, params)
    blocks = [header] if header else []
    work = 0
    regions = [body] if len(body) else []  # a stack: the next region to read on top
    while regions:
        members = regions.pop()
        work += len(members)
        cut = _best_cut(array[members], line_height, params) if work <= MAX_WORK else None
        if cut is None:
            blocks.append(_rows(array, members))
            continue
        axis, where = cut
        before = array[members, axis + 2] <= where
        regions.append(members[~before])
        regions.append(members[before])
    return blocks + ([footer] if footer else [])


def _furniture(
    boxes: np.ndarray, line_height: float, params: LayoutParams
) -> tuple[list[int], np.ndarray, list[int]]:
    """(header, body, footer): the page's top row when the empty band under it is at least
    `furniture_gap` line heights, its lines in reading order (else empty), the indices of the
    lines between, and the bottom row likewise."""
    everyone = np.arange(len(boxes))
    widths, starts = _gaps(boxes, 1)
    wide = np.flatnonzero(widths >= params.furniture_gap * line_height)
    if not len(wide):
        return [], everyone, []
    tops, bottoms = boxes[:, 1], boxes[:, 3]
    over = bottoms <= starts[wide[0]]  # above the topmost wide band
    under = tops >= starts[wide[-1]] + widths[wide[-1]]  # below the lowest
    header = _furniture_row(
        boxes, everyone[over], _gutters(boxes[~over], line_height, params), line_height
    )
    footer = _furniture_row(
        boxes, everyone[under], _gutters(boxes[~under], line_height, params), line_height
    )
    body = np.setdiff1d(everyone, np.asarray(header + footer, dtype=np.int64))
    return header, body, footer


def _gutters(boxes: np.ndarray, line_height: float, params: LayoutParams) -> np.ndarray:
    """The body's column gutters: empty bands of its x projection at least `column_gap` line
    heights wide, as (start, end) rows."""
    widths, starts = _gaps(boxes, 0) if len(boxes) else (np.empty(0), np.empty(0))
    keep = widths >= params.column_gap * line_height
    return np.stack([starts[keep], starts[keep] + widths[keep]], axis=1)


def _furniture_row(
    boxes: np.ndarray, members: np.ndarray, gutters: np.ndarray, line_height: float
) -> list[int]:
    """`members` in reading order when they are one row of furniture, else empty: not when
    they are several rows, nor when they are the body's columns' first (last) lines: none across
    a gutter of the body, and one beginning where the column after that gutter begins (column
    headings, read with their columns; a page number at the right margin begins elsewhere)."""
    if not len(members) or len(_row_groups(boxes, members)) != 1:
        return []
    x0, x1 = boxes[members, 0], boxes[members, 2]
    for start, end in gutters:
        across = (x0 < end) & (x1 > start)
        after = x0[x0 >= end]
        if not across.any() and len(after) and after.min() - end < line_height:
            return []
    return _rows(boxes, members)


def _best_cut(
    boxes: np.ndarray, line_height: float, params: LayoutParams
) -> tuple[int, float] | None:
    """The widest empty band across the region, in line heights, that is wide enough to cut:
    (axis, where it starts); columns win ties. None: the region is one block."""
    best: tuple[float, int, float] | None = None  # (gap in line heights, axis, where)
    for axis, minimum in ((0, params.column_gap), (1, params.paragraph_gap)):
        widths, starts = _gaps(boxes, axis)
        if not len(widths):
            continue
        first = int(np.argmax(widths))  # the first of the widest
        size = float(widths[first]) / line_height
        if size >= minimum and (best is None or size > best[0]):
            best = (size, axis, float(starts[first]))
    return None if best is None else (best[1], best[2])


def _gaps(boxes: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """Empty bands of the boxes' projection on `axis` (0: x, 1: y), in order along it: their
    widths and where each starts."""
    order = np.argsort(boxes[:, axis], kind="stable")
    starts, ends = boxes[order, axis], boxes[order, axis + 2]
    reach = np.maximum.accumulate(ends)[:-1]  # how far the boxes before each one reach
    empty = starts[1:] > reach
    return starts[1:][empty] - reach[empty], reach[empty]


def _rows(boxes: np.ndarray, members: np.ndarray) -> list[int]:
    """One block's lines top to bottom; lines on one row (overlapping by half the lower one's
    height) left to right."""
    return [i for row in _row_groups(boxes, members) for i in row]


def _row_groups(boxes: np.ndarray, members: np.ndarray) -> list[list[int]]:
    """The lines' rows, top to bottom, each left to right (`_rows`)."""
    order = members[np.lexsort((boxes[members, 0], boxes[members, 1]))]
    rows: list[list[int]] = []
    top = bottom = 0.0  # the current row's band: its lines' lowest top, highest bottom
    for i in order.tolist():
        y0, y1 = float(boxes[i, 1]), float(boxes[i, 3])
        if rows:
            overlap = min(bottom, y1) - max(top, y0)
            if overlap >= 0.5 * min(bottom - top, y1 - y0):
                rows[-1].append(i)
                top, bottom = max(top, y0), min(bottom, y1)
                continue
        rows.append([i])
        top, bottom = y0, y1
    return [sorted(row, key=lambda j: boxes[j, 0]) for row in rows]
