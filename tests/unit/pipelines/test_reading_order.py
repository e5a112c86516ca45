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


def _read(boxes: list[tuple[int, int, int, int]]) -> list[tuple[int, int, int, int]]:
    return [boxes[i] for block in reading_order(boxes) for i in block]


def test_a_running_header_at_the_top_right_reads_first() -> None:
    # Shared MIME-info's page 2 (issue 39, item 7): the header beside nothing but the heading
    # under it was a column of its own, read after the heading.
    header, heading = (879, 94, 1120, 114), (249, 140, 813, 170)
    body = _column(249, 1120, 215, 3, pitch=27, height=20)
    boxes = [heading, *body, header]
    order = _read(boxes)
    assert order == [header, heading, *body]
    assert reading_order(boxes)[0] == [len(boxes) - 1]  # the header is a block alone


def test_a_footer_under_the_left_column_reads_last() -> None:
    left, right = _column(50, 560, 100, 5), _column(640, 1150, 100, 5)
    footer = (50, 380, 120, 410)  # a page number at the bottom left
    header = (980, 20, 1150, 50), (50, 20, 400, 50)  # a running title and a date, one row
    boxes = [*header, *left, *right, footer]
    assert _read(boxes) == [header[1], header[0], *left, *right, footer]


def test_column_headings_stay_with_their_columns() -> None:
    # Each column's first line, a gap under both: not furniture, each read with its column.
    left, right = _column(50, 560, 160, 4), _column(640, 1150, 160, 4)
    headings = [(50, 100, 300, 130), (640, 100, 900, 130)]
    boxes = [*headings, *left, *right]
    assert _read(boxes) == [headings[0], *left, headings[1], *right]


def test_rows_near_the_body_are_not_furniture() -> None:
    # Line spacing under the top row and over the bottom one: one paragraph, no furniture.
    boxes = _column(50, 600, 100, 4, pitch=40, height=30)
    assert reading_order(boxes) == [[0, 1, 2, 3]]
    # A page of two rows far apart: the first reads first.
    assert reading_order([(50, 300, 600, 330), (700, 20, 900, 50)]) == [[1], [0]]
