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

Pure functions over boxes: no image, no model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

Box = tuple[int, int, int, int]
"""x0, y0, x1, y1."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LayoutParams:
    """How wide an empty band must be, in median line heights, to cut a region."""

    paragraph_gap: float = 0.8
    """Between lines above and below: a smaller gap is line spacing within a paragraph."""
    column_gap: float = 1.0
    """Between columns: wider than the space between two words of a line."""


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
    blocks: list[list[int]] = []
    _cut(array, list(range(len(array))), line_height, params, blocks)
    return blocks


def _cut(
    boxes: np.ndarray,
    members: list[int],
    line_height: float,
    params: LayoutParams,
    blocks: list[list[int]],
) -> None:
    """Appends the blocks of the region holding `members`, in reading order."""
    best: tuple[float, int, float] | None = None  # (gap in line heights, axis, where)
    for axis, minimum in ((0, params.column_gap), (1, params.paragraph_gap)):
        for gap, where in _gaps(boxes[members], axis):
            size = gap / line_height
            if size >= minimum and (best is None or size > best[0]):
                best = (size, axis, where)
    if best is None:
        blocks.append(_rows(boxes, members))
        return
    _, axis, where = best
    before = [i for i in members if boxes[i, axis + 2] <= where]
    after = [i for i in members if boxes[i, axis + 2] > where]
    _cut(boxes, before, line_height, params, blocks)
    _cut(boxes, after, line_height, params, blocks)


def _gaps(boxes: np.ndarray, axis: int) -> list[tuple[float, float]]:
    """Empty bands of the boxes' projection on `axis` (0: x, 1: y): (width, where it starts)."""
    order = np.argsort(boxes[:, axis], kind="stable")
    gaps = []
    reach = boxes[order[0], axis + 2]
    for i in order[1:]:
        start, end = boxes[i, axis], boxes[i, axis + 2]
        if start > reach:
            gaps.append((float(start - reach), float(reach)))
        reach = max(reach, end)
    return gaps


def _rows(boxes: np.ndarray, members: list[int]) -> list[int]:
    """One block's lines top to bottom; lines on one row (overlapping by half the lower one's
    height) left to right."""
    order = sorted(members, key=lambda i: (boxes[i, 1], boxes[i, 0]))
    rows: list[list[int]] = []
    for i in order:
        if rows:
            last = rows[-1]
            top = max(boxes[j, 1] for j in last)
            bottom = min(boxes[j, 3] for j in last)
            overlap = min(bottom, boxes[i, 3]) - max(top, boxes[i, 1])
            if overlap >= 0.5 * min(bottom - top, boxes[i, 3] - boxes[i, 1]):
                last.append(i)
                continue
        rows.append([i])
    return [i for row in rows for i in sorted(row, key=lambda j: boxes[j, 0])]
