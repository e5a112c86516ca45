"""A page straightened (`?deskew=true`, OCRmyPDF's `--deskew`): its OCR turned by its skew about
the page's centre, as the PDF writer turns its image, so that the text layer lies on the
straightened page (issue 48).

OCRmyPDF straightens the page image before its OCR (re-rasterised, the page's size kept, its
corners cut); we read the page as sent, and turn the image in the PDF (drawn turned, never
re-encoded: a JPEG stays the JPEG sent) and the OCR's coordinates by the same angle. Lines come
out level, each word on the line's band at its place along it.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from serving.outputs.document import Block, Box, Line, Page, Word


def turn_points(points: np.ndarray, angle_deg: float, centre: tuple[float, float]) -> np.ndarray:
    """`points` (..., 2), y down, turned `angle_deg` counter-clockwise about `centre`."""
    turn = math.radians(angle_deg)
    cos, sin = math.cos(turn), math.sin(turn)
    x, y = points[..., 0] - centre[0], points[..., 1] - centre[1]
    return np.stack([x * cos + y * sin + centre[0], -x * sin + y * cos + centre[1]], axis=-1)


def levelled(page: Page) -> Page:
    """`page` with every coordinate turned by `-page.skew` about its centre, its skew 0: the
    OCR of the page straightened. The page itself when it is level."""
    if not page.skew:
        return page
    centre = (page.width / 2, page.height / 2)
    blocks = tuple(
        Block(box=_box_of(lines), lines=lines)
        for lines in (
            tuple(_line(line, -page.skew, centre, page.skew) for line in block.lines)
            for block in page.blocks
        )
        if lines
    )
    return dataclasses.replace(page, blocks=blocks, skew=0.0)


def _line(line: Line, angle: float, centre: tuple[float, float], skew: float) -> Line:
    quad = turn_points(np.asarray(line.poly, dtype=np.float64), angle, centre)
    box = _bounds(quad)
    thickness = box[3] - box[1]
    slant = abs(math.sin(math.radians(skew)))
    words = []
    for word in line.words:
        x0, y0, x1, y1 = word.box
        ((cx, _),) = turn_points(np.array([[(x0 + x1) / 2, (y0 + y1) / 2]]), angle, centre)
        # The word's upright box on the askew page is its length along the line and a slant of
        # the line's thickness; level, it is that length on the line's band.
        length = max(x1 - x0 - thickness * slant, (x1 - x0) / 2) / math.cos(math.radians(skew))
        words.append(
            Word(
                text=word.text,
                box=(round(cx - length / 2), box[1], round(cx + length / 2), box[3]),
                score=word.score,
            )
        )
    return dataclasses.replace(
        line,
        poly=tuple((round(float(x)), round(float(y))) for x, y in quad),
        box=box,
        words=tuple(words),
    )


def _bounds(points: np.ndarray) -> Box:
    return (
        math.floor(float(points[:, 0].min())),
        math.floor(float(points[:, 1].min())),
        math.ceil(float(points[:, 0].max())),
        math.ceil(float(points[:, 1].max())),
    )


def _box_of(lines: tuple[Line, ...]) -> Box:
    return (
        min(line.box[0] for line in lines),
        min(line.box[1] for line in lines),
        max(line.box[2] for line in lines),
        max(line.box[3] for line in lines),
    )
