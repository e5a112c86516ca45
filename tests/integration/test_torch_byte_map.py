"""The torch detector's map quantised to bytes on its device (`pipelines.det_byte_map`, issue 40):
on real maps the bitmap is `p > thresh` exactly and every value within 1/254 of the probability;
a page read with byte maps has the boxes (within a pixel) and the texts it has with float maps;
and through a device worker a det batch leaves the device, and crosses shared memory, in a
quarter of the float map's bytes. On the torch CPU device; a GPU runs the same forward.

The pages read for texts (twice, byte and float maps) take the dense page's first 16 lines, its
full width, cropped below them (2026-12-07, for the suite's time: the whole page's 40 lines
cost the test most of its time); the bitmap and the bytes are checked on the whole page."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from models.base import ByteMapOutput
from models.bundle import load_bundle
from models.spec import ModelSpec
from pipelines.det_byte_map import BYTE_MAP_SCALE, byte_map_level, quantize_map
from pipelines.page import prepare
from pipelines.stages import DET
from pipelines.types import DetParams
from serving.config import AppConfig, EngineConfig
from serving.convert.pdf_pages import find_real_pdfs, render_pdf_pages
from serving.engine.choice import engine_choice
from serving.engine.local import LocalEngine, ocr_page
from serving.request_options import ocr_options
from serving.workers import shm
from serving.workers.device_worker import DeviceWorkerChild, ItemOk, WorkerSetup
from tests import images
from tests.conftest import ONE_SET

pytest.importorskip("torch", reason="the torch extra (make install-test installs it)")

THRESH = DetParams().thresh

SYNTHETIC: dict[str, Callable[[], np.ndarray]] = {
    "latin": lambda: images.latin_lines().image,
    "chinese": lambda: images.chinese_lines().image,
    "rotated": lambda: images.rotated_line().image,
    "dense": lambda: images.dense_page().image,
}

DENSE_TOP_LINES = 16
"""The lines of the dense page read for texts: two headings and their body lines."""


READ: dict[str, Callable[[], np.ndarray]] = {
    **{name: make for name, make in SYNTHETIC.items() if name != "dense"},
    "dense-top": lambda: images.dense_page_top(DENSE_TOP_LINES).image,
}
"""The pages read for texts with byte and with float maps."""


def _config(onnx_dir: str) -> AppConfig:
    return AppConfig(
        models=ONE_SET,
        engine=dataclasses.replace(
            EngineConfig(), cpu_backend="torch", cpu_threads=2, onnx_dir=onnx_dir
        ),
    )


@pytest.fixture(scope="module")
def engine(onnx_dir: str) -> LocalEngine:
    engine = LocalEngine(_config(onnx_dir))
    engine.load()
    return engine


@pytest.fixture(scope="module")
def float_det(onnx_dir: str) -> Iterator[Any]:
    """A second detector on the same model, left answering float maps."""
    config = _config(onnx_dir)
    spec: ModelSpec = load_bundle(config.models.det, config.models.rec).det
    predictor = engine_choice(config, "cpu").predictor(spec)
    predictor.load()
    yield predictor
    predictor.close()


def _pages() -> Iterator[tuple[str, np.ndarray]]:
    for name, make in SYNTHETIC.items():
        yield name, make()
    for pdf in find_real_pdfs()[:1]:
        (page,) = render_pdf_pages(pdf, dpi=150, count=1)
        yield pdf.stem, page


def test_the_engine_answers_byte_maps_as_the_server_asks(engine: LocalEngine) -> None:
    det = engine.predictors["det"]
    assert isinstance(det, ByteMapOutput)
    assert det.byte_map_thresh == engine.config.pipeline.det.thresh
    assert not isinstance(engine.predictors["rec"], ByteMapOutput) or (
        engine.predictors["rec"].byte_map_thresh is None
    )


def test_the_bitmap_is_the_float_maps_exactly(engine: LocalEngine, float_det: Any) -> None:
    det = engine.predictors["det"]
    level = byte_map_level(THRESH)
    checked = 0
    for name, image in _pages():
        batch = prepare(image, DetParams()).inputs[0]
        prob = float_det.run(batch)
        byte = det.run(batch)
        assert byte.dtype == np.uint8, name
        assert byte.shape == prob.shape, name
        assert np.array_equal(byte > level, prob > np.float32(THRESH)), name
        error = np.abs(byte / np.float32(BYTE_MAP_SCALE) - prob)
        assert float(error.max()) < 1 / BYTE_MAP_SCALE, name
        # Computed on the device as the host's reference computes it.
        assert np.array_equal(byte, quantize_map(prob, THRESH)), name
        # Where rounding alone would put a pixel on the other side of the threshold.
        rounded = np.round(prob * np.float32(BYTE_MAP_SCALE))
        checked += int(((rounded > level) != (prob > np.float32(THRESH))).sum())
    assert checked > 20, "the maps have pixels where rounding alone would change the bitmap"


def test_byte_maps_read_the_boxes_and_texts_of_float_maps(
    engine: LocalEngine, float_det: Any
) -> None:
    options = ocr_options(engine.bundle, engine.config.pipeline)
    floats = {**engine.predictors, "det": float_det}
    lines = 0
    for name, make in READ.items():
        image = make()
        ours = ocr_page(engine.predictors, image, options, engine.bundle.charset).lines
        theirs = ocr_page(floats, image, options, engine.bundle.charset).lines
        assert [ln.text for ln in ours] == [ln.text for ln in theirs], name
        for a, b in zip(ours, theirs, strict=True):
            assert np.abs(a.poly.astype(int) - b.poly.astype(int)).max() <= 1, name
        lines += len(ours)
    assert lines > 20


def _child(predictors: dict[str, Any], prefix: str, det_thresh: float | None) -> Any:
    setup = WorkerSetup(model_dirs={}, shm_prefix=prefix, det_thresh=det_thresh)
    child = DeviceWorkerChild(spec=None, setup=setup, conn=None)  # type: ignore[arg-type]
    child.use(predictors)
    return child


def test_a_det_batch_leaves_the_device_in_a_quarter_of_the_bytes(
    engine: LocalEngine, float_det: Any
) -> None:
    """Through a device worker's staged path (uint8 pixels in, as the server sends them): the
    slot's copy back is uint8, a quarter of the float32 map, and so is what the worker puts in
    shared memory (half of the float16 map it put before), for CPU workers to post-process."""
    claim = shm.claim_prefix()
    prefix = claim.prefix + "bytemap_"
    byte_child = _child({"det": engine.predictors["det"]}, prefix, THRESH)
    float_child = _child({"det": float_det}, prefix, None)
    assert byte_child.stages["det"] is not DET
    assert float_child.stages["det"] is DET
    try:
        steps = [prepare(make(), DetParams()) for make in (SYNTHETIC["latin"], SYNTHETIC["dense"])]
        sizes = {(p.data.shape[2], p.data.shape[3]) for s in steps for p in s.pixels}
        for step in steps:
            refs = [shm.put(p.data, prefix, p.sizes) for p in step.pixels]
            copied = {}
            shared = {}
            for name, child in (("byte", byte_child), ("float", float_child)):
                batch = child.start_batch("det", refs)
                assert batch.slot is not None  # launched on the lane
                copied[name] = batch.slot.result().nbytes
                (outcome,) = batch.finish()
                assert isinstance(outcome, ItemOk)
                shared[name] = outcome.value
            assert copied["byte"] * 4 == copied["float"]
            assert shared["byte"].dtype == np.dtype(np.uint8).str
            assert shared["byte"].nbytes * 2 == shared["float"].nbytes  # float16 before
            assert shared["byte"].nbytes * 4 == copied["float"]
        assert len(sizes) == 2
    finally:
        shm.sweep(prefix)
        claim.release()
