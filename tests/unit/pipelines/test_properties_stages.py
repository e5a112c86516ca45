"""Properties of the pipeline stages on random shapes, maps, quads and recogniser outputs.

Hypothesis runs each property on a fixed, bounded set of inputs (`tests/properties.py`).
"""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from pipelines.cls_postprocess import apply_orientation, classify_orientation
from pipelines.cls_preprocess import plan_cls_batches
from pipelines.crop import boxes_from_polys, crop_text_lines, sort_quad_boxes
from pipelines.det_postprocess import postprocess_det
from pipelines.det_preprocess import det_input_size, preprocess_det
from pipelines.ocr import run_page
from pipelines.rec_postprocess import build_charset, decode_ctc, reduce_rec_output
from pipelines.rec_preprocess import plan_rec_chunks, resize_norm_rec
from pipelines.types import ClsParams, DetParams, RecParams
from tests.properties import assert_bgr_image, counted, prob_map

seeds = st.integers(0, 2**32 - 1)
sides = st.integers(1, 400)


def _image(seed: int, height: int, width: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)


det_params = st.builds(
    DetParams,
    limit_side_len=st.integers(1, 10**6),
    limit_type=st.sampled_from(["min", "max", "resize_long"]),
    max_side_limit=st.integers(32, 1500),
    thresh=st.floats(0.0, 1.0),
    box_thresh=st.floats(0.0, 1.0),
    unclip_ratio=st.floats(0.0, 4.0),
    max_candidates=st.integers(1, 60),
)


@given(height=sides, width=sides, params=det_params, seed=seeds)
@counted(max_examples=150)
def test_det_resize_multiples_of_32_within_limits(
    height: int, width: int, params: DetParams, seed: int
) -> None:
    det_input = preprocess_det(_image(seed, height, width), params)
    channels, det_h, det_w = det_input.tensor.shape
    assert det_input.tensor.dtype == np.float32
    assert channels == 3
    assert det_h % 32 == 0
    assert det_w % 32 == 0
    # Sides are rounded to the nearest multiple of 32, so they may pass max_side_limit by 16.
    assert 32 <= min(det_h, det_w) <= max(det_h, det_w) <= max(32, params.max_side_limit + 16)
    assert (det_input.src_h, det_input.src_w) == (height, width)
    # What the memory budget charges before decoding is what the detector then gets.
    assert det_input_size(height, width, params) == (det_h, det_w)
    padded_h, padded_w = (
        (max(32, height), max(32, width)) if height + width < 64 else (height, width)
    )
    assert round(det_input.ratio_h * padded_h) == det_h
    assert round(det_input.ratio_w * padded_w) == det_w
    assert np.isfinite(det_input.tensor).all()
    assert -2.2 < det_input.tensor.min() <= det_input.tensor.max() < 2.7  # ImageNet mean/std


@given(
    map_h=st.integers(1, 8).map(lambda n: 32 * n),
    map_w=st.integers(1, 8).map(lambda n: 32 * n),
    src=st.tuples(st.integers(1, 2000), st.integers(1, 2000)),
    blobs=st.integers(0, 12),
    params=det_params,
    seed=seeds,
)
@counted(max_examples=150)
def test_db_postprocess_boxes_inside_the_source_image(
    map_h: int, map_w: int, src: tuple[int, int], blobs: int, params: DetParams, seed: int
) -> None:
    src_h, src_w = src
    polys = postprocess_det(prob_map(seed, map_h, map_w, blobs), src, params)
    assert polys.dtype == np.int16
    assert polys.shape[1:] == (4, 2)
    assert len(polys) <= params.max_candidates
    assert (polys[:, :, 0] >= 0).all()
    assert (polys[:, :, 0] <= src_w).all()
    assert (polys[:, :, 1] >= 0).all()
    assert (polys[:, :, 1] <= src_h).all()


quads = st.lists(
    st.lists(st.tuples(st.integers(-40, 440), st.integers(-40, 440)), min_size=4, max_size=4),
    max_size=8,
)


@given(height=sides, width=sides, quads=quads, seed=seeds)
@counted(max_examples=120)
def test_crops_of_random_quads_are_non_empty_uint8(
    height: int, width: int, quads: list[list[tuple[int, int]]], seed: int
) -> None:
    polys = np.array(quads, np.int16).reshape(-1, 4, 2)
    ordered = sort_quad_boxes(polys)
    assert sorted(map(bytes, ordered)) == sorted(map(bytes, polys))  # a permutation
    crops, kept = crop_text_lines(_image(seed, height, width), ordered)
    assert len(crops) == len(kept) <= len(polys)
    assert kept.shape == (len(crops), 4, 2)
    for crop in crops:
        assert_bgr_image(crop)
        assert crop.shape[0] < 1.5 * crop.shape[1]  # tall crops are turned on their side
    boxes = boxes_from_polys(kept)
    assert (boxes[:, 0] <= boxes[:, 2]).all()
    assert (boxes[:, 1] <= boxes[:, 3]).all()


crops_st = st.lists(st.tuples(st.integers(1, 120), st.integers(1, 900), seeds), max_size=14)


@given(crops=crops_st, batch_size=st.integers(1, 8), max_width=st.integers(48, 2000))
@counted(max_examples=80)
def test_rec_chunks_cover_every_crop_at_the_model_height(
    crops: list[tuple[int, int, int]], batch_size: int, max_width: int
) -> None:
    params = RecParams(batch_size=batch_size, max_width=max_width)
    images = [_image(seed, h, w) for h, w, seed in crops]
    chunks = plan_rec_chunks(images, params)
    assert sorted(i for c in chunks for i in c.indices) == list(range(len(images)))
    for chunk in chunks:
        n, channels, height, width = chunk.tensor.shape
        assert (n, channels, height) == (len(chunk.indices), 3, params.image_height)
        assert 1 <= n <= batch_size
        assert chunk.tensor.dtype == np.float32
        assert -1.0 <= chunk.tensor.min() <= chunk.tensor.max() <= 1.0
        for k, i in enumerate(chunk.indices):
            h, w = images[i].shape[:2]
            ratio = max(params.min_width / params.image_height, w / h)
            single = resize_norm_rec(images[i], ratio, params)
            expected_w = min(int(params.image_height * ratio), params.max_width)
            assert single.shape == (3, params.image_height, expected_w)
            assert expected_w <= width
            np.testing.assert_array_equal(chunk.tensor[k, :, :, :expected_w], single)
            assert not chunk.tensor[k, :, :, expected_w:].any()  # zero padding


def _reference_ctc(row: list[int], probs: list[float], charset: tuple[str, ...]) -> str:
    """Greedy CTC by hand: merge runs of a label, then drop the blank (label 0)."""
    text, previous = [], None
    for label in row:
        if label != previous and label != 0:
            text.append(charset[label])
        previous = label
    return "".join(text)


@given(
    labels=st.lists(st.characters(codec="utf-8"), min_size=1, max_size=30, unique=True),
    use_space=st.booleans(),
    rows=st.integers(1, 4),
    steps=st.integers(1, 40),
    seed=seeds,
)
@counted(max_examples=200)
def test_ctc_decode_matches_a_reference(
    labels: list[str], use_space: bool, rows: int, steps: int, seed: int
) -> None:
    charset = build_charset(labels, use_space_char=use_space)
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(rows, steps, len(charset))) * rng.uniform(0.1, 10)
    logits[:, :, 0] += rng.uniform(-3, 3)  # sometimes mostly blanks, sometimes none
    probs = np.exp(logits) / np.exp(logits).sum(axis=-1, keepdims=True)
    indices, max_probs = reduce_rec_output(probs.astype(np.float32))
    decoded = decode_ctc(indices, max_probs, charset)
    assert len(decoded) == rows
    for (text, score), row, row_probs in zip(decoded, indices, max_probs, strict=True):
        assert text == _reference_ctc(row.tolist(), row_probs.tolist(), charset)
        assert set(text) <= set("".join(charset[1:]))
        assert 0.0 <= score <= 1.0
        if not text:
            assert score == 0.0


@given(crops=crops_st, classes=st.integers(2, 4), batch_size=st.integers(1, 8), seed=seeds)
@counted(max_examples=60)
def test_cls_batches_and_orientation_keep_every_crop(
    crops: list[tuple[int, int, int]], classes: int, batch_size: int, seed: int
) -> None:
    params = ClsParams(batch_size=batch_size)
    images = [_image(s, h, w) for h, w, s in crops]
    batches = plan_cls_batches(images, params)
    assert [i for indices, _ in batches for i in indices] == list(range(len(images)))
    probs = np.random.default_rng(seed).random((len(images), classes))
    ids = classify_orientation(probs) if images else []
    assert all(0 <= i < classes for i in ids)
    for indices, pixels in batches:
        tensor = pixels.normalized("cls")
        assert tensor.shape == (len(indices), 3, params.image_height, params.image_width)
        assert np.isfinite(tensor).all()
    turned = apply_orientation(images, [i % 2 for i in ids])
    assert [t.shape for t in turned] == [i.shape for i in images]


@given(
    height=st.integers(1, 300),
    width=st.integers(1, 600),
    blobs=st.integers(0, 8),
    params=det_params,
    score_thresh=st.floats(0.0, 1.0),
    seed=seeds,
)
@counted(max_examples=80)
def test_run_page_with_random_model_outputs(
    height: int, width: int, blobs: int, params: DetParams, score_thresh: float, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    charset = build_charset(["a", "b", "c"])

    def det(batch: np.ndarray) -> np.ndarray:
        return prob_map(seed, batch.shape[2], batch.shape[3], blobs)[np.newaxis, np.newaxis]

    def rec(batch: np.ndarray) -> np.ndarray:
        probs = rng.random((batch.shape[0], max(1, batch.shape[3] // 8), len(charset)))
        return (probs / probs.sum(axis=-1, keepdims=True)).astype(np.float32)

    def cls(batch: np.ndarray) -> np.ndarray:
        return rng.random((batch.shape[0], 2))

    page = run_page(
        _image(seed, height, width),
        det=det,
        rec=rec,
        cls=cls if seed % 2 else None,
        det_params=params,
        rec_params=RecParams(score_thresh=score_thresh),
        cls_params=ClsParams(),
        charset=charset,
    )
    assert (page.width, page.height) == (width, height)
    assert len(page.lines) <= len(page.dt_polys) == len(page.orientations)
    for line in page.lines:
        assert set(line.text) <= set("abc ")
        assert score_thresh <= line.score <= 1.0
        assert line.poly.shape == (4, 2)
        assert (line.poly[:, 0] >= 0).all()
        assert (line.poly[:, 0] <= width).all()
        assert (line.poly[:, 1] >= 0).all()
        assert (line.poly[:, 1] <= height).all()
