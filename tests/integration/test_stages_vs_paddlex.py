"""Our stage functions against the PaddleX 3.7.2 classes they mirror: results must be identical."""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterator
from typing import Any

import cv2
import numpy as np
import pytest

from pipelines.cls_postprocess import apply_orientation, classify_orientation
from pipelines.cls_preprocess import plan_cls_batches
from pipelines.crop import boxes_from_polys, crop_text_lines, sort_quad_boxes
from pipelines.det_postprocess import postprocess_det
from pipelines.det_preprocess import preprocess_det
from pipelines.ocr import run_page
from pipelines.rec_postprocess import build_charset, decode_ctc, reduce_rec_output
from pipelines.rec_preprocess import plan_rec_chunks, resize_norm_rec
from pipelines.types import ClsParams, DetParams, PageResult, RecParams

pytestmark = pytest.mark.integration

# paddlex is a test dependency: a missing one must fail, not skip.
os.environ.setdefault("PADDLE_PDX_DISABLE_MODEL_SOURCE_CHECK", "True")
pdx_det = importlib.import_module("paddlex.inference.models.text_detection.processors")
pdx_rec = importlib.import_module("paddlex.inference.models.text_recognition.processors")
pdx_common = importlib.import_module("paddlex.inference.models.common")
pdx_cls = importlib.import_module("paddlex.inference.models.image_classification.processors")
pdx_components = importlib.import_module("paddlex.inference.pipelines.components")
pdx_reader = importlib.import_module("paddlex.inference.common.reader")
pdx_sampler = importlib.import_module("paddlex.inference.common.batch_sampler")
pdx_ocr = importlib.import_module("paddlex.inference.pipelines.ocr.pipeline")

CHARACTERS = list("0123456789abcdefghij")
CHARSET = build_charset(CHARACTERS)
CLS_LABELS = ["0_degree", "180_degree"]


# ---------------------------------------------------------------- synthetic pages and fake nets


def _page_with_lines() -> np.ndarray:
    """A gray page with dark blobs: lines, a rotated quad, a tall blob and a very wide line."""
    rng = np.random.default_rng(7)
    page = np.full((420, 900, 3), 205, np.uint8)
    page += rng.integers(0, 20, page.shape, dtype=np.uint8)
    for y in (20, 60):
        for x0, x1 in ((20, 160), (200, 330), (380, 600)):
            cv2.rectangle(page, (x0, y + (x0 % 7)), (x1, y + 18 + (x0 % 7)), (30, 40, 50), -1)
    rect = ((300.0, 170.0), (200.0, 24.0), 17.0)  # rotated text line
    cv2.fillPoly(page, [cv2.boxPoints(rect).astype(np.int32)], (20, 60, 25))
    cv2.rectangle(page, (820, 120), (845, 300), (40, 30, 30), -1)  # tall vertical line
    cv2.rectangle(page, (10, 360), (885, 368), (25, 25, 25), -1)  # w/h > 66.7: 3200 cap
    cv2.rectangle(page, (40, 240), (120, 262), (60, 60, 60), -1)
    for x in range(60, 500, 40):  # "characters" inside a box, to give rec something to read
        cv2.rectangle(page, (x, 300), (x + 12 + x % 9, 330), (15, 15, 15), -1)
    return page


def _fake_det_net(x: np.ndarray) -> np.ndarray:
    gray = x.mean(axis=1, keepdims=True)
    prob: np.ndarray = (1.0 / (1.0 + np.exp(4.0 * gray))).astype(np.float32)
    return prob


def _fake_rec_net(x: np.ndarray) -> np.ndarray:
    n, _, _, width = x.shape
    steps = width // 8
    cols = x[:, :, :, : steps * 8].mean(axis=(1, 2)).reshape(n, steps, 8).mean(axis=2)  # (n, T)
    context = x.mean(axis=(1, 2, 3))[:, None]  # depends on the padding, like SVTR
    centers = np.linspace(-2.5, 2.5, len(CHARSET), dtype=np.float32)
    feat = (cols * 1.7 + 0.05 * context)[:, :, None]
    logits = -((feat - centers) ** 2) * 6.0
    logits[:, :, 0] += 0.8 * (np.abs(cols) < 0.2)  # blank on padding
    exp = np.exp(logits - logits.max(axis=-1, keepdims=True))
    probs: np.ndarray = (exp / exp.sum(axis=-1, keepdims=True)).astype(np.float32)
    return probs


def _fake_cls_net(x: np.ndarray) -> np.ndarray:
    top = x[:, :, : x.shape[2] // 2].mean(axis=(1, 2, 3))
    bottom = x[:, :, x.shape[2] // 2 :].mean(axis=(1, 2, 3))
    logits = np.stack([bottom - top, top - bottom], axis=1) * 3.0
    exp = np.exp(logits)
    probs: np.ndarray = (exp / exp.sum(axis=1, keepdims=True)).astype(np.float32)
    return probs


# ---------------------------------------------------------------- PaddleX reference pieces


def _pdx_det_input(image: np.ndarray, params: DetParams) -> tuple[np.ndarray, np.ndarray]:
    resize = pdx_det.DetResizeForTest(
        limit_side_len=params.limit_side_len,
        limit_type=params.limit_type,
        max_side_limit=params.max_side_limit,
    )
    imgs, shapes = resize([image], params.limit_side_len, params.limit_type, params.max_side_limit)
    imgs = pdx_det.NormalizeImage(
        mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225], scale=1.0 / 255, order="hwc"
    )(imgs)
    imgs = pdx_common.ToCHWImage()(imgs)
    return pdx_common.ToBatch()(imgs)[0], shapes[0]


def _pdx_db(params: DetParams) -> Any:
    return pdx_det.DBPostProcess(
        thresh=params.thresh,
        box_thresh=params.box_thresh,
        max_candidates=params.max_candidates,
        unclip_ratio=params.unclip_ratio,
    )


def _pdx_dt_polys(prob: np.ndarray, shape: np.ndarray, params: DetParams) -> np.ndarray:
    boxes, _ = _pdx_db(params)([prob[None, None]], [shape])
    return np.asarray(boxes[0])


def _pdx_crops(image: np.ndarray, polys: Any) -> tuple[list[np.ndarray], list[np.ndarray]]:
    subs = pdx_components.CropByPolys(det_box_type="quad")(image, polys)
    kept = [(s, p) for s, p in zip(subs, polys, strict=True) if s.size > 0]
    return [s for s, _ in kept], [p for _, p in kept]


def _pdx_cls_tensor(crops: list[np.ndarray], params: ClsParams) -> np.ndarray:
    imgs = pdx_reader.ReadImage(format="RGB")(crops)
    imgs = pdx_common.Resize(target_size=[params.image_width, params.image_height])(imgs)
    imgs = pdx_common.Normalize(
        scale=1.0 / 255, mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225]
    )(imgs)
    imgs = pdx_common.ToCHWImage()(imgs)
    batch: np.ndarray = pdx_common.ToBatch()(imgs)[0]
    return batch


def _pdx_rec_batch(crops: list[np.ndarray], params: RecParams) -> np.ndarray:
    op = pdx_rec.OCRReisizeNormImg(rec_image_shape=[3, params.image_height, params.min_width])
    batch: np.ndarray = pdx_rec.ToBatch()(op(crops))[0]
    return batch


# ---------------------------------------------------------------- detection

DET_CASES = [
    ("page", (420, 900), DetParams()),
    ("page-max", (420, 900), DetParams(limit_side_len=320, limit_type="max")),
    ("page-long", (420, 900), DetParams(limit_side_len=500, limit_type="resize_long")),
    ("tiny", (20, 30), DetParams()),  # h + w < 64: zero padded to 32 x 32 first
    ("thin", (40, 10), DetParams()),  # h + w < 64, padded in one side only
    ("small", (50, 70), DetParams()),  # min side < 64: upscaled
    ("huge", (50, 4100), DetParams()),  # upscaled past max_side_limit: scaled back
    ("exact", (64, 96), DetParams()),  # no resize at all
]


def _det_image(name: str, size: tuple[int, int]) -> np.ndarray:
    if name.startswith("page"):
        return _page_with_lines()
    rng = np.random.default_rng(len(name) * 1000 + size[0])
    return rng.integers(0, 256, (*size, 3), dtype=np.uint8)


@pytest.mark.parametrize(("name", "size", "params"), DET_CASES, ids=[c[0] for c in DET_CASES])
def test_preprocess_det_matches_paddlex(
    name: str, size: tuple[int, int], params: DetParams
) -> None:
    image = _det_image(name, size)
    ours = preprocess_det(image, params)
    ref, shape = _pdx_det_input(image, params)
    assert ours.tensor.dtype == ref.dtype == np.float32
    assert np.array_equal(ours.tensor[None], ref)
    assert [ours.src_h, ours.src_w, ours.ratio_h, ours.ratio_w] == shape.tolist()


@pytest.mark.parametrize(
    "params",
    [
        DetParams(),
        DetParams(thresh=0.5, box_thresh=0.8, unclip_ratio=2.0),
        DetParams(limit_side_len=320, limit_type="max", box_thresh=0.3),
    ],
)
def test_postprocess_det_matches_paddlex_on_page(params: DetParams) -> None:
    image = _page_with_lines()
    det_input = preprocess_det(image, params)
    prob = _fake_det_net(det_input.tensor[None])[0, 0]
    ours = postprocess_det(prob, det_input, params)
    _, shape = _pdx_det_input(image, params)
    ref = _pdx_dt_polys(prob, shape, params)
    assert len(ours) >= 10
    assert ours.dtype == np.int16
    assert np.array_equal(ours, ref)


@pytest.mark.parametrize("unclip_ratio", [1.5, 0.3])
def test_postprocess_det_matches_paddlex_on_noisy_maps(unclip_ratio: float) -> None:
    rng = np.random.default_rng(3)
    params = DetParams(thresh=0.5, box_thresh=0.55, max_candidates=40, unclip_ratio=unclip_ratio)
    for trial in range(5):
        small = rng.random((24, 32)).astype(np.float32)
        prob = cv2.resize(small, (32 * 20, 32 * 15), interpolation=cv2.INTER_CUBIC)
        prob = np.clip(prob, 0, 1).astype(np.float32)
        src = (470 + trial * 13, 611 - trial * 7)
        ours = postprocess_det(prob, src, params)
        ref = _pdx_dt_polys(prob, np.array([src[0], src[1], 1.0, 1.0]), params)
        assert len(ours) > 0
        assert np.array_equal(ours, ref.reshape(-1, 4, 2))


def test_postprocess_det_empty_map_matches_paddlex() -> None:
    prob = np.zeros((64, 96), np.float32)
    ours = postprocess_det(prob, (64, 96), DetParams())
    ref = _pdx_dt_polys(prob, np.array([64, 96, 1.0, 1.0]), DetParams())
    assert ours.shape == (0, 4, 2)
    assert ref.size == 0


# ---------------------------------------------------------------- sorting, crops, boxes


def _random_quads(rng: np.random.Generator, n: int) -> np.ndarray:
    quads = []
    for _ in range(n):
        cx, cy = rng.uniform(30, 570), rng.uniform(30, 370)
        w, h, angle = rng.uniform(8, 160), rng.uniform(6, 60), rng.uniform(-40, 40)
        quads.append(cv2.boxPoints(((cx, cy), (w, h), angle)))
    raw = np.clip(np.round(np.array(quads)), 0, 599)
    return raw.astype(np.int16)


def test_sort_quad_boxes_matches_paddlex() -> None:
    rng = np.random.default_rng(11)
    sorter = pdx_components.SortQuadBoxes()
    for n in (1, 2, 7, 40):
        quads = _random_quads(rng, n)
        quads[: n // 2, 0, 1] = quads[0, 0, 1] + rng.integers(-9, 10, n // 2)  # same-line jitter
        ref = np.array(sorter(list(quads)))
        assert np.array_equal(sort_quad_boxes(quads), ref)


def test_crop_text_lines_matches_paddlex() -> None:
    rng = np.random.default_rng(5)
    image = rng.integers(0, 256, (400, 600, 3), dtype=np.uint8)
    quads = _random_quads(rng, 30)
    tall = np.array([[100, 50], [120, 50], [120, 200], [100, 200]], np.int16)
    degenerate = np.array([[10, 10], [50, 10], [50, 10], [10, 10]], np.int16)
    quads = np.concatenate([quads, tall[None], degenerate[None]])
    crops, kept = crop_text_lines(image, quads)
    ref_crops, ref_polys = _pdx_crops(image, quads)
    assert len(crops) == len(ref_crops) == len(quads)
    assert all(np.array_equal(a, b) for a, b in zip(crops, ref_crops, strict=True))
    assert np.array_equal(kept, np.array(ref_polys))
    assert crops[-2].shape[0] < crops[-2].shape[1]  # tall line turned by rot90


def test_boxes_from_polys_matches_paddlex() -> None:
    quads = _random_quads(np.random.default_rng(2), 9)
    ref = pdx_components.convert_points_to_boxes(list(quads))
    assert np.array_equal(boxes_from_polys(quads), ref)
    assert pdx_components.convert_points_to_boxes([]).size == boxes_from_polys([]).size == 0


# ---------------------------------------------------------------- recognition


def _rec_crops() -> list[np.ndarray]:
    rng = np.random.default_rng(9)
    sizes = [(30, 200), (48, 48), (20, 1500), (32, 100), (25, 1000), (40, 330), (8, 875)]
    sizes += [(31, 12), (48, 320), (50, 160), (36, 1700), (16, 300), (30, 200), (60, 20)]
    return [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in sizes]


@pytest.mark.parametrize("max_wh_ratio", [320 / 48, 7.3, 10.0, 66.0, 66.7, 70.0, 200.0])
def test_resize_norm_rec_matches_paddlex(max_wh_ratio: float) -> None:
    op = pdx_rec.OCRReisizeNormImg(rec_image_shape=[3, 48, 320])
    for crop in _rec_crops():
        ours = resize_norm_rec(crop, max_wh_ratio, RecParams())
        ref = op.resize_norm_img(crop, max_wh_ratio)
        assert ours.dtype == ref.dtype == np.float32
        assert np.array_equal(ours, ref)


def test_plan_rec_chunks_matches_paddlex_pipeline() -> None:
    crops = _rec_crops()
    params = RecParams()
    chunks = plan_rec_chunks(crops, params)
    # pipeline.py: stable sort by w / h, then the predictor's batches of batch_size.
    order = sorted(range(len(crops)), key=lambda i: crops[i].shape[1] / float(crops[i].shape[0]))
    assert [i for c in chunks for i in c.indices] == order
    assert any(c.tensor.shape[3] == 3200 for c in chunks)
    for k, chunk in enumerate(chunks):
        ids = order[k * params.batch_size : (k + 1) * params.batch_size]
        assert chunk.indices == tuple(ids)
        assert np.array_equal(chunk.tensor, _pdx_rec_batch([crops[i] for i in ids], params))


def test_decode_ctc_matches_paddlex() -> None:
    rng = np.random.default_rng(4)
    decoder = pdx_rec.CTCLabelDecode(character_list=CHARACTERS)
    assert tuple(decoder.character) == CHARSET
    for steps in (1, 5, 40, 400):
        logits = rng.normal(size=(6, steps, len(CHARSET))).astype(np.float32) * 3
        logits[:, : steps // 3, 0] += 5  # many blanks
        logits[1] = logits[1, :1]  # one row that repeats a single label
        logits[2, :, 0] += 100  # all blanks: score 0.0
        exp = np.exp(logits - logits.max(axis=-1, keepdims=True))
        probs = (exp / exp.sum(axis=-1, keepdims=True)).astype(np.float32)
        texts, scores = decoder([probs])
        ours = decode_ctc(*reduce_rec_output(probs), CHARSET)
        assert [t for t, _ in ours] == texts
        assert [s for _, s in ours] == scores  # identical floats, not approximately equal
        assert all(type(s) is float for _, s in ours)


# ---------------------------------------------------------------- textline orientation


def test_plan_cls_batches_matches_paddlex() -> None:
    crops = [*_rec_crops(), np.zeros((80, 160, 3), np.uint8) + 77]  # one needs no resize
    params = ClsParams()
    batches = plan_cls_batches(crops, params)
    assert [b[0] for b in batches] == [tuple(range(i, min(i + 6, 15))) for i in range(0, 15, 6)]
    for indices, pixels in batches:
        assert pixels.data.dtype == np.uint8
        tensor = pixels.normalized("cls")
        assert np.array_equal(tensor, _pdx_cls_tensor([crops[i] for i in indices], params))


def test_classify_orientation_matches_paddlex_topk() -> None:
    rng = np.random.default_rng(8)
    probs = rng.random((20, 2)).astype(np.float32)
    probs[3] = [0.5, 0.5]  # a tie
    ids, _, _ = pdx_cls.Topk(class_ids=CLS_LABELS)([probs], topk=1)
    assert classify_orientation(probs) == [int(i) for i in ids.ravel()]


def test_apply_orientation_matches_paddlex_rotate_image() -> None:
    crops = _rec_crops()
    ids = [i % 2 for i in range(len(crops))]
    ours = apply_orientation(crops, ids)
    for crop, class_id, got in zip(crops, ids, ours, strict=True):
        ref = pdx_components.rotate_image(crop, class_id * 180)
        assert np.array_equal(got, ref)


# ---------------------------------------------------------------- whole page vs _OCRPipeline


class _RefDetModel:
    def __init__(self, params: DetParams) -> None:
        self.params = params

    def __call__(self, images: list[np.ndarray], **kw: Any) -> Iterator[dict[str, Any]]:
        for image in images:
            x, shape = _pdx_det_input(image, self.params)
            yield {"dt_polys": _pdx_dt_polys(_fake_det_net(x)[0, 0], shape, self.params)}


class _RefRecModel:
    def __init__(self, params: RecParams) -> None:
        self.params = params
        self.decoder = pdx_rec.CTCLabelDecode(character_list=CHARACTERS)

    def __call__(self, crops: list[np.ndarray], **kw: Any) -> Iterator[dict[str, Any]]:
        size = self.params.batch_size
        for start in range(0, len(crops), size):
            batch = _pdx_rec_batch(crops[start : start + size], self.params)
            texts, scores = self.decoder([_fake_rec_net(batch)])
            for text, score in zip(texts, scores, strict=True):
                yield {"rec_text": text, "rec_score": score, "vis_font": None}


class _RefClsModel:
    def __init__(self, params: ClsParams) -> None:
        self.params = params

    def __call__(self, crops: list[np.ndarray]) -> Iterator[dict[str, Any]]:
        size = self.params.batch_size
        for start in range(0, len(crops), size):
            probs = _fake_cls_net(_pdx_cls_tensor(crops[start : start + size], self.params))
            ids, _, _ = pdx_cls.Topk(class_ids=CLS_LABELS)([probs], topk=1)
            for row in ids:
                yield {"class_ids": row}


def _paddlex_pipeline(
    det_params: DetParams, rec_params: RecParams, cls_params: ClsParams, use_cls: bool
) -> Any:
    pipe = pdx_ocr._OCRPipeline.__new__(pdx_ocr._OCRPipeline)
    pipe.use_doc_preprocessor = False
    pipe.use_textline_orientation = use_cls
    pipe.text_type = "general"
    pipe.text_det_limit_side_len = det_params.limit_side_len
    pipe.text_det_limit_type = det_params.limit_type
    pipe.text_det_max_side_limit = det_params.max_side_limit
    pipe.text_det_thresh = det_params.thresh
    pipe.text_det_box_thresh = det_params.box_thresh
    pipe.text_det_unclip_ratio = det_params.unclip_ratio
    pipe.text_rec_score_thresh = rec_params.score_thresh
    pipe.return_word_box = False
    pipe.batch_sampler = pdx_sampler.ImageBatchSampler(batch_size=1)
    pipe.img_reader = pdx_reader.ReadImage(format="BGR")
    pipe._sort_boxes = pdx_components.SortQuadBoxes()
    pipe._crop_by_polys = pdx_components.CropByPolys(det_box_type="quad")
    pipe.text_det_model = _RefDetModel(det_params)
    pipe.text_rec_model = _RefRecModel(rec_params)
    pipe.textline_orientation_model = _RefClsModel(cls_params)
    return pipe


def _run_ours(image: np.ndarray, use_cls: bool, rec_params: RecParams) -> PageResult:
    return run_page(
        image,
        det=_fake_det_net,
        rec=_fake_rec_net,
        cls=_fake_cls_net if use_cls else None,
        det_params=DetParams(),
        rec_params=rec_params,
        cls_params=ClsParams(),
        charset=CHARSET,
    )


@pytest.mark.parametrize(
    ("use_cls", "filtered", "image_name"),
    [(False, False, "page"), (True, False, "page"), (True, True, "page"), (True, False, "blank")],
)
def test_run_page_matches_paddlex_ocr_pipeline(
    use_cls: bool, filtered: bool, image_name: str
) -> None:
    image = _page_with_lines() if image_name == "page" else np.full((100, 200, 3), 220, np.uint8)
    rec_params = RecParams()
    if filtered:  # threshold exactly at the median score: that line must be kept (>=)
        scores = sorted(ln.score for ln in _run_ours(image, use_cls, rec_params).lines)
        rec_params = RecParams(score_thresh=scores[len(scores) // 2])
    pipe = _paddlex_pipeline(DetParams(), rec_params, ClsParams(), use_cls)
    (ref,) = list(pipe.predict(image))
    page = _run_ours(image, use_cls, rec_params)
    assert (page.width, page.height) == (image.shape[1], image.shape[0])
    assert len(page.dt_polys) == len(ref["dt_polys"])
    assert all(np.array_equal(a, b) for a, b in zip(page.dt_polys, ref["dt_polys"], strict=True))
    assert page.orientations == ref.get("textline_orientation_angles", [])
    assert [ln.text for ln in page.lines] == ref["rec_texts"]
    assert [ln.score for ln in page.lines] == ref["rec_scores"]
    assert all(
        np.array_equal(ln.poly, p) for ln, p in zip(page.lines, ref["rec_polys"], strict=True)
    )
    boxes = boxes_from_polys([ln.poly for ln in page.lines])
    assert np.array_equal(boxes.ravel(), ref["rec_boxes"].ravel())
    if image_name == "page":
        assert len(page.dt_polys) >= 10
        assert all(ref["rec_texts"])
        if use_cls:
            assert set(page.orientations) == {0, 1}
        if filtered:
            assert rec_params.score_thresh in [ln.score for ln in page.lines]
            assert 0 < len(page.lines) < len(page.dt_polys)
    else:
        assert page.dt_polys == []
        assert page.lines == []
        assert page.orientations == []
