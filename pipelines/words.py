"""Word boxes from the recogniser's CTC alignment, as PaddleOCR's `return_word_box` places them.

The recogniser reads a line crop left to right in T steps (columns); greedy CTC decoding keeps
the step that emitted each character (`rec_postprocess.decode_ctc_paths`). PaddleOCR's
`cal_ocr_word_box` turns those steps into boxes: the crop's width is cut into equal cells, one a
step, over the part of the padded input the crop fills, and a word spans the cells of its
characters. Here the same, with three differences:

- A word is a run of characters between spaces, split where CJK and other scripts meet, so the
  words joined back (a space where there was one) give the line's text with its punctuation;
  PaddleOCR drops punctuation and spaces. A run of CJK characters is one word (PaddleOCR boxes
  each CJK character on its own).
- A word spans its characters' steps and half a character's pitch (its mean distance between
  steps) on either side (CTC emits a character at one step, often near its middle), so its box
  covers its first and last letters whole; PaddleOCR's stops at the last letter's step.
- Positions along the crop are mapped onto the line's quadrilateral (bilinear), so slanted lines,
  lines the classifier turned upside down and tall lines read top to bottom get boxes on the
  page where the text is; PaddleOCR takes the quad's axis-aligned extent.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import cv2
import numpy as np

from pipelines.rec_postprocess import CtcPath
from pipelines.rec_preprocess import rec_input_width, width_bucket
from pipelines.types import RecParams, Word

Box = tuple[int, int, int, int]
"""x0, y0, x1, y1 in page pixels, x1 and y1 exclusive (`pipelines.types.Word.box`)."""

__all__ = ["Box", "Word", "is_cjk", "line_words", "page_words", "split_words"]

_TALL_CROP_RATIO = 1.5
"""`pipelines.crop`: a crop this much taller than wide is turned 90 degrees before recognition."""


def is_cjk(char: str) -> bool:
    """Whether `char` is written without spaces between words: Han, kana, CJK punctuation and
    full-width forms (Hangul is spaced like Latin)."""
    code = ord(char)
    return (
        0x3000 <= code <= 0x30FF  # CJK punctuation, hiragana, katakana
        or 0x3400 <= code <= 0x4DBF  # extension A
        or 0x4E00 <= code <= 0x9FFF  # unified ideographs
        or 0xF900 <= code <= 0xFAFF  # compatibility ideographs
        or 0xFF00 <= code <= 0xFFEF  # full-width forms
        or 0x20000 <= code <= 0x2FFFF  # supplementary ideographs
    )


def split_words(text: str) -> list[tuple[int, int]]:
    """The words of a line as [start, end) character ranges: runs of non-space characters, cut
    where a CJK character meets another script."""
    spans: list[tuple[int, int]] = []
    start = None
    for i, char in enumerate(text):
        if char.isspace():
            if start is not None:
                spans.append((start, i))
                start = None
            continue
        if start is not None and is_cjk(char) != is_cjk(text[i - 1]):
            spans.append((start, i))
            start = i
        elif start is None:
            start = i
    if start is not None:
        spans.append((start, len(text)))
    return spans


def line_words(
    path: CtcPath, poly: np.ndarray, fill: float, flipped: bool = False
) -> tuple[Word, ...]:
    """The words of one recognised line, with their boxes on the page.

    Args:
        path: The line's decoded CTC path.
        poly: The line's quad on the page, (4, 2), points TL, TR, BR, BL.
        fill: The share of the recogniser's (padded) input width that the crop's pixels fill,
            in (0, 1] (PaddleOCR's `wh_ratio / max_wh_ratio`).
        flipped: The classifier turned the crop upside down before recognition.

    Returns:
        The words in reading order; () for an empty line.

    Raises:
        ValueError: `fill` is outside (0, 1] or the path's columns do not match its text.
    """
    if not 0 < fill <= 1:
        raise ValueError(f"fill must be in (0, 1], got {fill}")
    if len(path.columns) != len(path.text):
        raise ValueError(f"{len(path.columns)} columns for {len(path.text)} characters")
    if not path.text:
        return ()
    cols = path.steps * fill  # steps over the crop's own pixels
    quad = np.asarray(poly, dtype=np.float64).reshape(4, 2)
    tall = _is_tall(quad)
    words = []
    for start, end in split_words(path.text):
        left, right = _word_span(path.columns, start, end, cols)
        t0, t1 = left / cols, right / cols
        if flipped:
            t0, t1 = 1 - t1, 1 - t0
        words.append(
            Word(
                text=path.text[start:end],
                box=_box_on_quad(quad, t0, t1, tall),
                score=float(np.mean(path.probs[start:end])),
            )
        )
    return tuple(words)


def page_words(
    polys: np.ndarray | Sequence[np.ndarray],
    chunks: Sequence[tuple[int, ...]],
    paths: Sequence[CtcPath],
    orientations: Sequence[int] | None,
    rec_params: RecParams,
) -> list[tuple[Word, ...]]:
    """The words of every line of a page (`line_words`), each crop's `fill` worked out as
    `pipelines.rec_preprocess` padded it: its resized width over its chunk's padded width.

    Args:
        polys: The page's quads (`dt_polys`), one per crop.
        chunks: The crops of each recognition chunk (`plan_rec_chunks`' indices).
        paths: One decoded path per crop.
        orientations: One classifier class id per crop (1: turned 180 degrees), or None.
        rec_params: The recognition settings the chunks were planned with.

    Returns:
        One tuple of words per crop.
    """
    sizes = [_crop_size(np.asarray(poly)) for poly in polys]
    base = rec_params.min_width / rec_params.image_height
    fills = [1.0] * len(sizes)
    for indices in chunks:
        inputs = {}
        for i in indices:
            width, height = sizes[i]
            ratio = width / height
            padded = rec_input_width(max(base, ratio), rec_params)
            if int(rec_params.image_height * max(base, ratio)) > rec_params.max_width:
                content = padded  # squeezed to the cap
            else:
                content = min(padded, math.ceil(rec_params.image_height * ratio))
            inputs[i] = (content, padded)
        chunk_width = max(padded for _, padded in inputs.values())
        if rec_params.pad_widths_px:
            chunk_width = max(chunk_width, width_bucket(chunk_width, rec_params.pad_widths_px))
        for i, (content, _) in inputs.items():
            fills[i] = min(1.0, max(content, 1) / chunk_width)
    return [
        line_words(path, np.asarray(poly), fill, bool(orientations and orientations[i] == 1))
        for i, (path, poly, fill) in enumerate(zip(paths, polys, fills, strict=True))
    ]


def _crop_size(poly: np.ndarray) -> tuple[int, int]:
    """(width, height) of the crop `pipelines.crop` cuts for the quad, as recognised (a tall
    crop turned); at least 1 x 1."""
    rect = cv2.minAreaRect(poly.astype(np.int32))
    points = sorted(cv2.boxPoints(rect), key=lambda p: p[0])
    a, d = (0, 1) if points[1][1] > points[0][1] else (1, 0)
    b, c = (2, 3) if points[3][1] > points[2][1] else (3, 2)
    box = np.array([points[a], points[b], points[c], points[d]])
    width = int(max(np.linalg.norm(box[0] - box[1]), np.linalg.norm(box[2] - box[3])))
    height = int(max(np.linalg.norm(box[0] - box[3]), np.linalg.norm(box[1] - box[2])))
    width, height = max(width, 1), max(height, 1)
    if height / width >= _TALL_CROP_RATIO:
        width, height = height, width
    return width, height


def _word_span(columns: np.ndarray, start: int, end: int, cols: float) -> tuple[float, float]:
    """Characters [start, end)'s extent in steps: from half a character's pitch before the first
    one's step to half a pitch after the last one's, the pitch being the word's mean distance
    between steps (a one-character word: the distance to its nearest neighbour in the line)."""
    centres = columns.astype(np.float64) + 0.5
    if end - start > 1:
        half = (centres[end - 1] - centres[start]) / (end - start - 1) / 2
    else:
        gaps = [
            abs(centres[start] - centres[j])
            for j in (start - 1, start + 1)
            if 0 <= j < len(centres)
        ]
        half = min(gaps) / 2 if gaps else 1.0
    half = max(half, 0.5)
    return max(0.0, centres[start] - half), min(cols, centres[end - 1] + half)


def _is_tall(quad: np.ndarray) -> bool:
    """The line's crop was turned 90 degrees counter-clockwise (`pipelines.crop`): it reads from
    the quad's top edge to its bottom."""
    width = max(np.linalg.norm(quad[0] - quad[1]), np.linalg.norm(quad[2] - quad[3]))
    height = max(np.linalg.norm(quad[0] - quad[3]), np.linalg.norm(quad[1] - quad[2]))
    return bool(width > 0 and height / width >= _TALL_CROP_RATIO)


def _box_on_quad(quad: np.ndarray, t0: float, t1: float, tall: bool) -> Box:
    """The page box of the band [t0, t1] of the crop's reading axis."""
    if tall:
        corners = [_bilinear(quad, u, v) for u in (0.0, 1.0) for v in (t0, t1)]
    else:
        corners = [_bilinear(quad, u, v) for u in (t0, t1) for v in (0.0, 1.0)]
    xs = [p[0] for p in corners]
    ys = [p[1] for p in corners]
    return (
        int(np.floor(min(xs))),
        int(np.floor(min(ys))),
        int(np.ceil(max(xs))),
        int(np.ceil(max(ys))),
    )


def _bilinear(quad: np.ndarray, u: float, v: float) -> np.ndarray:
    """The point at (u, v) of the unit square mapped onto the quad TL, TR, BR, BL."""
    tl, tr, br, bl = quad
    point: np.ndarray = (1 - u) * (1 - v) * tl + u * (1 - v) * tr + u * v * br + (1 - u) * v * bl
    return point
