"""Word boxes from the CTC alignment (`pipelines.words`), on hand-made paths and quads."""

from __future__ import annotations

import numpy as np
import pytest

from pipelines.rec_postprocess import CtcPath, build_charset, decode_ctc, decode_ctc_paths
from pipelines.types import RecParams
from pipelines.words import line_words, page_words, split_words


def _path(text: str, columns: list[int], steps: int) -> CtcPath:
    return CtcPath(
        text=text,
        score=0.9,
        columns=np.asarray(columns, np.int32),
        probs=np.linspace(0.5, 1.0, len(text), dtype=np.float32),
        steps=steps,
    )


def _quad(x0: int, y0: int, x1: int, y1: int) -> np.ndarray:
    return np.array([[x0, y0], [x1, y0], [x1, y1], [x0, y1]], np.int16)


def test_split_words_cuts_at_spaces_and_where_cjk_meets_latin() -> None:
    text = "Hello, world 价格100元 ok"
    assert [text[a:b] for a, b in split_words(text)] == [
        "Hello,",
        "world",
        "价格",
        "100",
        "元",
        "ok",
    ]
    assert split_words("   ") == []


def test_decode_keeps_the_step_of_each_character_and_the_same_texts() -> None:
    charset = build_charset(list("abc"))  # blank, a, b, c, " "
    indices = np.array([[1, 1, 0, 2, 0, 4, 3, 3, 0, 0]], np.int32)
    probs = np.full((1, 10), 0.5, np.float32)
    (path,) = decode_ctc_paths(indices, probs, charset)
    assert (path.text, path.columns.tolist(), path.steps) == ("ab c", [0, 3, 5, 6], 10)
    assert decode_ctc(indices, probs, charset) == [(path.text, path.score)]


def test_words_sit_where_their_steps_are_on_the_line() -> None:
    # 100 steps over a 1000 px line: ten pixels a step; "ab" read at steps 10-12, "cd" at 60-62.
    path = _path("ab cd", [10, 12, 35, 60, 62], steps=100)
    first, second = line_words(path, _quad(0, 0, 1000, 40), fill=1.0)
    assert (first.text, second.text) == ("ab", "cd")
    assert 85 <= first.box[0] < 105 < 125 < first.box[2] <= 145
    assert 585 <= second.box[0] < 605
    assert 625 < second.box[2] <= 645
    assert first.box[1::2] == second.box[1::2] == (0, 40)
    assert first.score == pytest.approx(float(np.mean(path.probs[:2])))


def test_padding_is_not_part_of_the_line() -> None:
    # The crop fills half the recogniser's input: step 50 is the line's right end.
    path = _path("a", [49], steps=100)
    (word,) = line_words(path, _quad(0, 0, 500, 40), fill=0.5)
    assert 470 <= word.box[0] < word.box[2] <= 500


def test_a_line_turned_upside_down_reads_from_the_right() -> None:
    path = _path("ab", [5, 7], steps=100)
    (word,) = line_words(path, _quad(0, 0, 1000, 40), fill=1.0, flipped=True)
    assert word.box[0] > 900


def test_a_tall_line_reads_top_to_bottom() -> None:
    path = _path("ab", [5, 7], steps=100)
    (word,) = line_words(path, _quad(0, 0, 40, 1000), fill=1.0)
    assert (word.box[0], word.box[2]) == (0, 40)
    assert 40 <= word.box[1] < word.box[3] <= 95


def test_page_words_works_out_each_crops_share_of_its_chunk() -> None:
    params = RecParams()
    short, long = _quad(0, 0, 200, 48), _quad(0, 100, 1200, 148)
    paths = [_path("x", [int(s) - 1], steps=150) for s in (25, 150)]
    # One chunk: the long crop sets the padded width (1200 px, 150 steps); the short one fills a
    # sixth of it, so its last step is 25 and its word ends at its right edge.
    short_words, long_words = page_words([short, long], [(0, 1)], paths, None, params)
    assert 180 <= short_words[0].box[2] <= 200
    assert 1150 <= long_words[0].box[2] <= 1200


def test_bad_inputs_are_refused() -> None:
    with pytest.raises(ValueError, match="fill"):
        line_words(_path("a", [0], 10), _quad(0, 0, 10, 10), fill=0.0)
    with pytest.raises(ValueError, match="columns"):
        line_words(_path("ab", [0], 10), _quad(0, 0, 10, 10), fill=1.0)
    assert line_words(_path("", [], 10), _quad(0, 0, 10, 10), fill=1.0) == ()
