"""The page pipeline's steps (`pipelines.page`), and the two drivers of them: `run_page` in process
and the server's `OcrService` across its CPU stages and device workers (run inline here)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import cv2
import numpy as np
import pytest

from pipelines import page as steps
from pipelines.ocr import run_page
from pipelines.page_orientation import OriParams, to_sent_points, turn_upright
from pipelines.pixels import normalize
from pipelines.rec_postprocess import build_charset
from pipelines.stages import CLS, DET, REC, Stage
from pipelines.types import ClsParams, DetParams, PageResult, RecParams
from serving.decode.readers import DecodeLimits
from serving.workers import cpu_stages, shm
from tests.fakes.service import InlineScheduler, run_inline
from tests.images import encode_png

pytestmark = pytest.mark.unit

CHARSET = build_charset("abcd")
LIMITS = DecodeLimits(max_pdf_pages=2, pdf_render_scale=1.0, max_image_pixels=10**7)
REC_PARAMS = RecParams(batch_size=2)


def _page() -> np.ndarray:
    """Five dark bars of different lengths on a light page: lines for the fake detector."""
    page = np.full((200, 420, 3), 230, np.uint8)
    for i, (x0, x1) in enumerate([(20, 380), (40, 120), (200, 260), (30, 330), (250, 400)]):
        y = 15 + 38 * i
        cv2.rectangle(page, (x0, y), (x1, y + 16 + 3 * i), (30 + 20 * i, 20, 20), -1)
    return page


def det(batch: np.ndarray) -> np.ndarray:
    """Dark is text."""
    prob: np.ndarray = 1.0 / (1.0 + np.exp(4.0 * batch.mean(axis=1, keepdims=True)))
    return prob.astype(np.float32)


def rec(batch: np.ndarray) -> np.ndarray:
    """A class per 8-column step, from that step's pixels (padding included)."""
    n, _, _, width = batch.shape
    steps_ = max(width // 8, 1)
    means = batch[:, :, :, : steps_ * 8].reshape(n, -1, steps_, 8).mean(axis=(1, 3))
    classes = (np.abs(means) * 50).astype(np.int64) % len(CHARSET)
    probs = np.full((n, steps_, len(CHARSET)), 0.02, np.float32)
    rows, cols = np.indices((n, steps_))
    probs[rows, cols, classes] = 0.5 + (np.abs(means) % 0.4)
    return probs


def cls(batch: np.ndarray) -> np.ndarray:
    """Upside down or not, from the crop's pixels."""
    turned = (np.abs(batch.reshape(batch.shape[0], -1).mean(axis=1)) * 100).astype(int) % 2
    probs = np.full((batch.shape[0], 2), 0.1, np.float32)
    probs[np.arange(batch.shape[0]), turned] = 0.9
    return probs


def _as_tuples(page: PageResult) -> tuple[object, ...]:
    return (
        page.width,
        page.height,
        [p.tolist() for p in page.dt_polys],
        page.orientations,
        [(ln.text, ln.score, ln.poly.tolist(), ln.orientation) for ln in page.lines],
    )


def test_steps_await_det_then_cls_then_rec() -> None:
    image = _page()
    step = steps.prepare(image, DetParams())
    assert step.state.awaiting == "det"
    assert step.state.batches == ((0,),)
    assert [t.shape for t in step.inputs] == [(1, 3, 192, 416)]
    maps = [DET.output(det(t)) for t in step.inputs]
    step = steps.after_det(step.state, image, maps, DetParams(), REC_PARAMS, ClsParams())
    assert step.state.awaiting == "cls"
    assert len(step.state.crops) == len(step.state.polys) == 5
    assert [len(b) for b in step.state.batches] == [5]
    step = steps.after_cls(step.state, [CLS.output(cls(t)) for t in step.inputs], REC_PARAMS)
    assert step.state.awaiting == "rec"
    assert step.state.crops == ()
    assert step.state.orientations is not None
    assert len(step.state.orientations) == 5
    assert sorted(i for b in step.state.batches for i in b) == [0, 1, 2, 3, 4]
    assert [t.shape[0] for t in step.inputs] == [2, 2, 1]
    page = steps.finish(step.state, [REC.output(rec(t)) for t in step.inputs], REC_PARAMS, CHARSET)
    assert len(page.dt_polys) == 5
    assert page.orientations == list(step.state.orientations)


def test_a_step_refuses_outputs_it_does_not_await() -> None:
    image = _page()
    step = steps.prepare(image, DetParams())
    with pytest.raises(ValueError, match="awaits det"):
        steps.after_cls(step.state, [np.zeros((1, 2), np.float32)], REC_PARAMS)
    with pytest.raises(ValueError, match="1 det calls awaited but 2 outputs"):
        steps.after_det(step.state, image, [np.zeros((1, 8, 8))] * 2, DetParams(), REC_PARAMS, None)
    with pytest.raises(ValueError, match="detector output"):
        DET.output(np.zeros((1, 8, 8), np.float32))


def _read(image: np.ndarray, cls_params: ClsParams | None = None, **ori: Any) -> PageResult:
    """`run_page` with the fakes: the classifier where `cls_params`, page orientation where
    `ori` (its `ori` and `ori_params`)."""
    return run_page(
        image,
        det=det,
        rec=rec,
        cls=cls if cls_params is not None else None,
        det_params=DetParams(),
        rec_params=REC_PARAMS,
        cls_params=cls_params or ClsParams(),
        charset=CHARSET,
        **ori,
    )


@pytest.mark.parametrize("use_cls", [False, True])
def test_the_server_path_answers_as_run_page(use_cls: bool) -> None:
    image = _page()
    options = SimpleNamespace(
        det=DetParams(),
        rec=REC_PARAMS,
        cls=ClsParams(batch_size=3) if use_cls else None,
        ori=None,
        stages={},
        model_set="",
    )
    expected = _read(image, cls_params=options.cls)
    models = {"det": det, "rec": rec, "cls": cls}
    scheduler_stages: list[str] = []

    async def ocr(service):  # type: ignore[no-untyped-def]
        pages = await service.ocr(encode_png(image), "image", options, timeout_s=60.0)
        assert isinstance(service.scheduler, InlineScheduler)
        scheduler_stages.extend(service.scheduler.stages)
        return pages

    (output,) = run_inline(ocr, models=models, charset=CHARSET, limits=LIMITS)
    assert _as_tuples(output.result) == _as_tuples(expected)
    assert len(expected.lines) == 5
    if use_cls:  # some crops were turned before recognition
        assert set(expected.orientations) == {0, 1}
    assert scheduler_stages == ["det", *(["cls", "cls"] if use_cls else []), "rec", "rec", "rec"]


def _ori(angle: int):  # type: ignore[no-untyped-def]
    """A page classifier that answers `angle` for every page, sure of it."""

    def classify(batch: np.ndarray) -> np.ndarray:
        probs = np.full((batch.shape[0], 4), 0.02, np.float32)
        probs[:, angle // 90] = 0.94
        return probs

    return classify


@pytest.mark.parametrize("quarters", [1, 2, 3])
def test_a_turned_page_reads_as_upright_in_the_sent_pages_boxes(quarters: int) -> None:
    upright = _page()
    sent = np.ascontiguousarray(np.rot90(upright, -quarters))  # clockwise: the classifier's angle
    angle = 90 * quarters
    params = OriParams()
    reference = _read(upright)
    expected = _read(sent, ori=_ori(angle), ori_params=params)
    assert [line.text for line in expected.lines] == [line.text for line in reference.lines]
    assert (expected.width, expected.height) == (sent.shape[1], sent.shape[0])
    height, width = upright.shape[:2]
    for got, want in zip(expected.lines, reference.lines, strict=True):
        np.testing.assert_array_equal(got.poly, to_sent_points(want.poly, angle, width, height))
        # The box covers the same pixels of the page as sent as it did upright.
        x0, y0 = got.poly.min(axis=0)
        x1, y1 = got.poly.max(axis=0)
        wx0, wy0 = want.poly.min(axis=0)
        wx1, wy1 = want.poly.max(axis=0)
        assert np.array_equal(turn_upright(sent[y0:y1, x0:x1], angle), upright[wy0:wy1, wx0:wx1])
    options = SimpleNamespace(
        det=DetParams(), rec=REC_PARAMS, cls=None, ori=params, stages={}, model_set=""
    )
    models = {"ori": _ori(angle), "det": det, "rec": rec, "cls": cls}
    scheduler_stages: list[str] = []

    async def ocr(service):  # type: ignore[no-untyped-def]
        pages = await service.ocr(encode_png(sent), "image", options, timeout_s=60.0)
        scheduler_stages.extend(service.scheduler.stages)
        return pages

    (output,) = run_inline(ocr, models=models, charset=CHARSET, limits=LIMITS)
    assert _as_tuples(output.result) == _as_tuples(expected)
    assert output.result.page_orientation == expected.page_orientation
    assert scheduler_stages[:2] == ["ori", "det"]


def _model_input(stage: Stage, ref: shm.ShmRef) -> np.ndarray:
    """The float32 input a device worker makes of an item's pixels."""
    return normalize(stage, shm.take(ref, unlink=False), ref.sizes)


def test_crops_wait_for_the_classifier_in_one_segment() -> None:
    prefix = "testcrops_"
    cpu_stages.set_worker_state(CHARSET, prefix)
    try:
        page = cpu_stages.prepare_page_of(encode_png(_page()), "image", 0, LIMITS, DetParams())
        (det_input,) = page.step.inputs
        maps = [shm.put(DET.output(det(_model_input("det", det_input))), prefix)]
        step = cpu_stages.after_det(
            page.step, maps, page.image, DetParams(), REC_PARAMS, ClsParams()
        )
        assert step.state.crops == ()
        assert step.crops is not None
        assert len(step.crops.shapes) == 5
        assert step.crops.data in step.refs()
        image = shm.take(page.image, unlink=False)
        direct = steps.after_det(
            page.step.state,
            image,
            [DET.output(det(_model_input("det", det_input)))],
            DetParams(),
            REC_PARAMS,
            ClsParams(),
        )
        shared = cpu_stages.after_cls(
            step, [CLS.output(cls(_model_input("cls", t))) for t in step.inputs], REC_PARAMS
        )
        local = steps.after_cls(
            direct.state, [CLS.output(cls(t)) for t in direct.inputs], REC_PARAMS
        )
        assert shared.state.batches == local.state.batches
        assert shared.state.orientations == local.state.orientations
        for ref, tensor in zip(shared.inputs, local.inputs, strict=True):
            assert shm.view(ref).dtype == np.uint8  # pixels cross processes, a byte a channel
            assert np.array_equal(_model_input("rec", ref), tensor)
    finally:
        shm.sweep(prefix)
