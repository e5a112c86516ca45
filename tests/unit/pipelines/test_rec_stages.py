"""Unit tests for recognition pre/postprocessing and the page composition built on them."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from pipelines.ocr import run_page
from pipelines.page import assemble_page, gather_rec_results
from pipelines.rec_postprocess import build_charset, decode_ctc, reduce_rec_output
from pipelines.rec_preprocess import plan_rec_chunks, resize_norm_rec
from pipelines.stages import DET, REC
from pipelines.types import ClsParams, DetParams, RecParams

pytestmark = pytest.mark.unit


def _solid(h: int, w: int, value: int) -> np.ndarray:
    return np.full((h, w, 3), value, np.uint8)


# ---------------------------------------------------------------- resize_norm_rec


def test_short_crop_is_resized_to_height_48_and_padded_to_320() -> None:
    out = resize_norm_rec(_solid(24, 100, 255), 320 / 48, RecParams())
    assert out.shape == (3, 48, 320)
    assert out.dtype == np.float32
    assert np.all(out[:, :, :200] == 1.0)  # ceil(48 * 100 / 24) = 200 columns of white
    assert np.all(out[:, :, 200:] == 0.0)  # zero padding


def test_values_are_scaled_to_minus_one_one_in_bgr_order() -> None:
    crop = np.zeros((48, 96, 3), np.uint8)
    crop[:, :, 1] = 255  # green in BGR
    out = resize_norm_rec(crop, 320 / 48, RecParams())
    assert np.all(out[0, :, :96] == -1.0)
    assert np.all(out[1, :, :96] == 1.0)
    assert np.all(out[2, :, :96] == -1.0)


def test_resized_width_is_capped_at_the_target_width() -> None:
    out = resize_norm_rec(_solid(10, 100, 0), 7.0, RecParams())  # own ratio 10 > 7
    assert out.shape == (3, 48, 336)
    assert np.all(out == -1.0)  # no padding: the crop fills all 336 columns


def test_wider_ratio_than_the_crop_pads_more() -> None:
    out = resize_norm_rec(_solid(48, 48, 255), 10.0, RecParams())
    assert out.shape == (3, 48, 480)
    assert np.all(out[:, :, :48] == 1.0)
    assert np.all(out[:, :, 48:] == 0.0)


def test_very_wide_crop_is_squeezed_to_max_width() -> None:
    crop = _solid(10, 1000, 255)
    crop[:, 500:] = 0
    out = resize_norm_rec(crop, 100.0, RecParams())  # int(48 * 100) = 4800 > 3200
    assert out.shape == (3, 48, 3200)
    assert np.all(out[:, :, :1590] == 1.0)
    assert np.all(out[:, :, 1610:] == -1.0)  # black half, not zero padding
    assert resize_norm_rec(crop, 100.0, RecParams(max_width=1600)).shape == (3, 48, 1600)


def test_resize_norm_rec_rejects_gray_crops() -> None:
    with pytest.raises(ValueError, match="BGR"):
        resize_norm_rec(np.zeros((10, 10), np.uint8), 7.0, RecParams())


# ---------------------------------------------------------------- plan_rec_chunks


def test_chunks_sort_by_aspect_ratio_stably_and_pad_to_the_widest() -> None:
    sizes = [(20, 400), (30, 30), (10, 100), (40, 80), (10, 20), (30, 30), (16, 1200), (48, 48)]
    crops = [_solid(h, w, 255) for h, w in sizes]
    chunks = plan_rec_chunks(crops, RecParams())
    # ratios: 20, 1, 10, 2, 2, 1, 75, 1 -> stable ascending order
    assert [c.indices for c in chunks] == [(1, 5, 7, 3, 4, 2), (0, 6)]
    assert chunks[0].tensor.shape == (6, 3, 48, 480)  # widest: ratio 10 -> 480
    assert chunks[1].tensor.shape == (2, 3, 48, 3200)  # ratio 75 -> squeezed to 3200
    # Every crop is normalised with its own ratio, then zero padded to the chunk width.
    first = chunks[0].tensor[0]
    assert np.array_equal(first[:, :, :320], resize_norm_rec(crops[1], 320 / 48, RecParams()))
    assert np.all(first[:, :, 48:] == 0.0)
    assert np.array_equal(
        chunks[1].tensor[0, :, :, :960], resize_norm_rec(crops[0], 20.0, RecParams())
    )
    assert np.all(chunks[1].tensor[0, :, :, 960:] == 0.0)


def test_chunk_size_comes_from_params() -> None:
    crops = [_solid(10, 10 * (i + 1), 0) for i in range(5)]
    chunks = plan_rec_chunks(crops, RecParams(batch_size=2))
    assert [c.indices for c in chunks] == [(0, 1), (2, 3), (4,)]
    assert plan_rec_chunks([], RecParams()) == []


# ---------------------------------------------------------------- CTC decoding

CHARSET = build_charset("abc")


def test_build_charset_puts_blank_first_and_space_last() -> None:
    assert CHARSET == ("blank", "a", "b", "c", " ")
    assert build_charset(["x", "yz"], use_space_char=False) == ("blank", "x", "yz")


def test_reduce_rec_output_keeps_only_argmax_and_max() -> None:
    probs = np.zeros((2, 3, 5), np.float32)
    probs[0, :, 2] = 0.7
    probs[1, :, 4] = 0.6
    probs[1, 1, 1] = 0.9
    idx, maxp = reduce_rec_output(probs)
    assert idx.dtype == np.int32
    assert maxp.dtype == np.float32
    assert idx.tolist() == [[2, 2, 2], [4, 1, 4]]
    assert np.allclose(maxp, [[0.7] * 3, [0.6, 0.9, 0.6]])


def test_the_rec_stage_reads_argmax_pairs_as_it_reads_the_whole_output() -> None:
    """What an engine that reduces on the device answers reads exactly as the full output."""
    rng = np.random.default_rng(3)
    probs = rng.random((4, 40, 18385), dtype=np.float32)
    probs[1, 5, [7, 9]] = 2.0  # a tie: the first index wins, as in numpy's argmax
    pairs = np.stack([probs.argmax(-1).astype(np.float32), probs.max(-1)], axis=-1)
    idx, maxp = REC.reading_argmax().output(pairs)
    want_idx, want_maxp = REC.output(probs)
    np.testing.assert_array_equal(idx, want_idx)
    np.testing.assert_array_equal(maxp, want_maxp)
    assert idx.dtype == np.int32
    assert maxp.dtype == np.float32
    assert idx[1, 5] == 7
    with pytest.raises(ValueError, match="argmax pairs"):
        REC.reading_argmax().output(probs)
    with pytest.raises(ValueError, match="more than the argmax"):
        DET.reading_argmax()


def test_decode_merges_repeats_and_drops_blanks() -> None:
    indices = np.array([[0, 1, 1, 0, 1, 2, 2, 0, 3], [4, 4, 1, 0, 0, 0, 4, 3, 3]], np.int32)
    probs = np.array(
        [[0.9, 0.8, 0.6, 0.99, 0.7, 0.5, 0.4, 0.9, 0.3], [0.6, 0.1, 0.8, 1, 1, 1, 0.4, 0.5, 0.2]],
        np.float32,
    )
    (text0, score0), (text1, score1) = decode_ctc(indices, probs, CHARSET)
    assert text0 == "aabc"
    assert score0 == pytest.approx((0.8 + 0.7 + 0.5 + 0.3) / 4, abs=1e-6)
    assert score0 == float(np.float32(0.8 + 0.7 + 0.5 + 0.3) / np.float32(4))
    assert text1 == " a c"
    assert score1 == pytest.approx((0.6 + 0.8 + 0.4 + 0.5) / 4, abs=1e-6)
    assert type(score0) is float


def test_all_blank_rows_decode_to_empty_text_with_score_zero() -> None:
    ((text, score),) = decode_ctc(np.zeros((1, 6), np.int32), np.ones((1, 6), np.float32), CHARSET)
    assert (text, score) == ("", 0.0)


# ---------------------------------------------------------------- page steps and run_page


def test_gather_rec_results_restores_crop_order() -> None:
    crops = [_solid(10, w, 0) for w in (300, 20, 100, 45, 10, 200, 60, 90)]
    chunks = plan_rec_chunks(crops, RecParams(batch_size=3))
    charset = build_charset("abcdefgh")
    # The fake recogniser answers with the letter of each crop's own index.
    outputs = [
        (
            np.array([[i + 1] for i in c.indices], np.int32),
            np.full((len(c.indices), 1), 0.5, np.float32),
        )
        for c in chunks
    ]
    results = gather_rec_results([c.indices for c in chunks], outputs, charset, len(crops))
    assert [t for t, _ in results] == list("abcdefgh")
    assert all(s == 0.5 for _, s in results)


def test_gather_rec_results_rejects_missing_outputs() -> None:
    chunks = [c.indices for c in plan_rec_chunks([_solid(10, 40, 0)] * 2, RecParams(batch_size=1))]
    one = (np.ones((1, 1), np.int32), np.ones((1, 1), np.float32))
    with pytest.raises(ValueError, match="outputs"):
        gather_rec_results(chunks, [one], CHARSET, 2)
    with pytest.raises(ValueError, match="no recognition result"):
        gather_rec_results(chunks, [one, one], CHARSET, 3)


def test_assemble_page_keeps_scores_at_or_above_the_threshold() -> None:
    polys = np.arange(24, dtype=np.int16).reshape(3, 4, 2)
    page = assemble_page(
        640, 480, polys, [("a", 0.5), ("b", 0.49), ("c", 0.7)], None, RecParams(score_thresh=0.5)
    )
    assert (page.width, page.height) == (640, 480)
    assert len(page.dt_polys) == 3
    assert page.orientations == [-1, -1, -1]
    assert [(ln.text, ln.score) for ln in page.lines] == [("a", 0.5), ("c", 0.7)]
    assert np.array_equal(page.lines[1].poly, polys[2])
    assert [ln.orientation for ln in page.lines] == [-1, -1]


def test_assemble_page_rejects_mismatched_lengths() -> None:
    with pytest.raises(ValueError, match="orientations"):
        assemble_page(1, 1, np.zeros((1, 4, 2), np.int16), [("a", 1.0)], [0, 1], RecParams())


def _rec_probs(rows: int, classes: list[int], prob: float) -> np.ndarray:
    """Raw recogniser output whose greedy path is `classes`, each step at `prob`."""
    rest = (1.0 - prob) / (len(CHARSET) - 1)
    probs = np.full((rows, len(classes), len(CHARSET)), rest, np.float32)
    probs[:, np.arange(len(classes)), classes] = prob
    return probs


def _page() -> np.ndarray:
    page = np.full((96, 320, 3), 230, np.uint8)
    cv2.rectangle(page, (200, 30), (300, 50), (20, 20, 20), -1)
    cv2.rectangle(page, (20, 32), (150, 52), (20, 20, 20), -1)
    return page


def _dark_is_text(x: np.ndarray) -> np.ndarray:
    prob: np.ndarray = (1.0 / (1.0 + np.exp(4.0 * x.mean(axis=1, keepdims=True)))).astype(
        np.float32
    )
    return prob


def test_run_page_chains_the_stages() -> None:
    calls: dict[str, list[tuple[int, ...]]] = {"det": [], "rec": [], "cls": []}

    def det(x: np.ndarray) -> np.ndarray:
        calls["det"].append(x.shape)
        return _dark_is_text(x)

    def rec(x: np.ndarray) -> np.ndarray:
        calls["rec"].append(x.shape)
        return _rec_probs(x.shape[0], [1, 1, 0, 2], 0.75)

    def cls(x: np.ndarray) -> np.ndarray:
        calls["cls"].append(x.shape)
        return np.array([[0.2, 0.8], [0.9, 0.1]], np.float32)

    page = run_page(
        _page(),
        det=det,
        rec=rec,
        cls=cls,
        det_params=DetParams(),
        rec_params=RecParams(),
        cls_params=ClsParams(),
        charset=CHARSET,
    )
    assert calls["det"] == [(1, 3, 96, 320)]
    assert calls["cls"] == [(2, 3, 80, 160)]
    assert len(calls["rec"]) == 1
    assert calls["rec"][0][:3] == (2, 3, 48)
    assert (page.width, page.height) == (320, 96)
    assert len(page.dt_polys) == 2
    assert [int(p[0, 0]) < 100 for p in page.dt_polys] == [True, False]  # left line first
    assert page.orientations == [1, 0]
    assert [(ln.text, ln.score, ln.orientation) for ln in page.lines] == [
        ("ab", 0.75, 1),
        ("ab", 0.75, 0),
    ]


def test_run_page_without_classifier_or_text() -> None:
    def rec(x: np.ndarray) -> np.ndarray:
        raise AssertionError("nothing to recognise")

    page = run_page(
        _solid(50, 80, 230),
        det=_dark_is_text,
        rec=rec,
        cls=None,
        det_params=DetParams(),
        rec_params=RecParams(),
        cls_params=ClsParams(),
        charset=CHARSET,
    )
    assert page.dt_polys == []
    assert page.lines == []
    assert page.orientations == []
    lines = run_page(
        _page(),
        det=_dark_is_text,
        rec=lambda x: _rec_probs(x.shape[0], [1, 1], 1.0),
        cls=None,
        det_params=DetParams(),
        rec_params=RecParams(),
        cls_params=ClsParams(),
        charset=CHARSET,
    )
    assert lines.orientations == [-1, -1]
    assert [ln.text for ln in lines.lines] == ["a", "a"]


def test_run_page_rejects_a_bad_detector_output() -> None:
    with pytest.raises(ValueError, match="detector output"):
        run_page(
            _page(),
            det=lambda x: x[:, :1, 0],
            rec=lambda x: _rec_probs(x.shape[0], [1], 1.0),
            cls=None,
            det_params=DetParams(),
            rec_params=RecParams(),
            cls_params=ClsParams(),
            charset=CHARSET,
        )
