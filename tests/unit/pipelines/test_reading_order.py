"""Blocks and reading order by recursive XY-cut (`pipelines.layout`), on hand-placed boxes."""

from __future__ import annotations

import time

from pipelines.layout import LayoutParams, reading_order


def _column(x0: int, x1: int, top: int, rows: int, pitch: int = 40, height: int = 30):
    return [(x0, top + pitch * r, x1, top + pitch * r + height) for r in range(rows)]


def test_two_columns_read_one_after_the_other_under_a_title() -> None:
    title = [(300, 20, 900, 60)]
    left, right = _column(50, 560, 100, 5), _column(640, 1150, 100, 5)
    # PaddleOCR's order: the title, then row by row across both columns.
    boxes = title + [b for pair in zip(left, right, strict=True) for b in pair]
    blocks = reading_order(boxes)
    order = [boxes[i] for block in blocks for i in block]
    assert order == title + left + right
    assert len(blocks) == 3


def test_paragraphs_split_at_wide_gaps_only() -> None:
    first, second = _column(50, 600, 100, 3), _column(50, 600, 260, 2)
    blocks = reading_order(first + second)
    assert blocks == [[0, 1, 2], [3, 4]]


def test_lines_of_one_row_read_left_to_right() -> None:
    boxes = [(300, 100, 500, 130), (50, 102, 280, 131)]  # a small gap: one row, not columns
    assert reading_order(boxes) == [[1, 0]]


def test_every_line_is_in_one_block() -> None:
    boxes = [(i * 37 % 900, i * 53 % 700, i * 37 % 900 + 120, i * 53 % 700 + 25) for i in range(40)]
    blocks = reading_order(boxes, LayoutParams(paragraph_gap=0.5, column_gap=0.5))
    assert sorted(i for block in blocks for i in block) == list(range(40))
    assert reading_order([]) == []


def _stacked(rows: int) -> list[tuple[int, int, int, int]]:
    """Lines one under another at equal gaps: the XY-cut cuts them off one at a time."""
    return [(50, 20 * r, 600, 20 * r + 10) for r in range(rows)]


def test_a_thousand_stacked_lines_need_no_recursion() -> None:
    # Recursive, this passed Python's recursion limit (a RecursionError, the server's 500).
    blocks = reading_order(_stacked(1500))
    assert blocks == [[i] for i in range(1500)]


def test_the_work_is_bounded_and_every_line_still_read_once() -> None:
    started = time.perf_counter()
    blocks = reading_order(_stacked(20_000))  # past MAX_WORK: the rest are blocks in rows
    assert time.perf_counter() - started < 5.0
    order = [i for block in blocks for i in block]
    assert order == list(range(20_000))
