"""OpenVINO recognisers answering argmax pairs (issue 46 item 4): the reduction built into the
compiled model gives, bit for bit, numpy's argmax and max of the full output, so CTC decoding
reads the same paths, with the real models and real crops, at each layout the CPU runs.

f32 and int8's float parts reduce in the graph; bf16 with the CTC head in f32 reduces in the
head; whole-model bf16 answers the full output and numpy reduces it (bf16 cannot hold the class
numbers).
"""

from __future__ import annotations

import numpy as np
import pytest

from models.bundle import ModelBundle, load_bundle
from models.embedded import resolve_model_dir
from models.engine_options import EngineOptions, OpenVinoPrecisionSetting
from models.openvino_backend import OPENVINO, OpenVinoPredictor
from models.spec import load_model_spec
from pipelines.page import after_det, prepare
from pipelines.rec_postprocess import argmax_pairs
from serving.config import AppConfig
from serving.convert import pdf_pages as pages
from serving.request_options import ocr_options

ov = pytest.importorskip("openvino")

RECOGNISERS = ("embedded:PP-OCRv5_mobile_rec", "embedded:PP-OCRv6_small_rec")
DETECTOR = "embedded:PP-OCRv6_small_det"


def _has_bf16() -> bool:
    return "BF16" in ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")


LAYOUTS: list[tuple[OpenVinoPrecisionSetting, bool]] = [("f32", True)]
"""(openvino_precision, openvino_f32_head) this CPU runs as asked: bf16 only where it has it."""
if _has_bf16():
    LAYOUTS += [("bf16", True), ("bf16", False)]


def _predictor(
    name: str,
    onnx_dir: str,
    precision: OpenVinoPrecisionSetting,
    f32_head: bool,
    *,
    lone_threads: int = 0,
) -> OpenVinoPredictor:
    """The model on one thread; where `lone_threads` is 2, compiled a second time for
    `run_alone` (only the model whose `run_alone` is read needs it)."""
    kind = "det" if name.endswith("_det") else "rec"
    spec = load_model_spec(resolve_model_dir(name), kind)
    options = EngineOptions(
        cpu_threads=1,
        lone_threads=lone_threads,
        onnx_dir=onnx_dir,
        openvino_precision=precision,
        openvino_f32_head=f32_head,
    )
    predictor = OPENVINO.predictor(spec, options)
    assert isinstance(predictor, OpenVinoPredictor)
    return predictor


@pytest.fixture(scope="module")
def rec_batches(onnx_dir: str) -> list[np.ndarray]:
    """A real page's recognition chunks, as the pipeline pads them (float32 model inputs)."""
    (first,) = pages.text_pages(pages.find_real_pdfs()[0], 1)
    image = first.image
    det = _predictor(DETECTOR, onnx_dir, "f32", True)
    det.load()
    bundle_options = ocr_options(_bundle(), AppConfig().pipeline)
    step = prepare(image, bundle_options.det)
    (det_input,) = step.inputs
    det_map = det.run(det_input)[:, 0]
    step = after_det(step.state, image, [det_map], bundle_options.det, bundle_options.rec, None)
    assert len(step.inputs) >= 3, "the page should read as several chunks"
    return [step.inputs[0], step.inputs[len(step.inputs) // 2], step.inputs[-1]]


def _bundle() -> ModelBundle:
    return load_bundle(DETECTOR, RECOGNISERS[1], "")


@pytest.mark.parametrize("name", RECOGNISERS)
@pytest.mark.parametrize(("precision", "f32_head"), LAYOUTS)
def test_argmax_pairs_equal_numpys_of_the_full_output(
    onnx_dir: str,
    rec_batches: list[np.ndarray],
    name: str,
    precision: OpenVinoPrecisionSetting,
    f32_head: bool,
) -> None:
    full = _predictor(name, onnx_dir, precision, f32_head)
    full.load()
    reduced = _predictor(name, onnx_dir, precision, f32_head, lone_threads=2)
    reduced.output_argmax()  # before load: compiled once, with the reduction
    reduced.load()
    for batch in rec_batches:
        probs = full.run(batch)
        expected = argmax_pairs(probs)
        for answer in (reduced.run(batch), reduced.run_alone(batch)):
            assert answer.shape == (*probs.shape[:2], 2)
            assert answer.dtype == np.float32
            np.testing.assert_array_equal(answer, expected)
        assert probs.shape[-1] > 6000  # the full output: thousands of classes a step


def test_asked_after_loading_it_compiles_again_and_answers_pairs(
    onnx_dir: str, rec_batches: list[np.ndarray]
) -> None:
    predictor = _predictor(RECOGNISERS[1], onnx_dir, "f32", True)
    predictor.load()
    probs = predictor.run(rec_batches[0])
    predictor.output_argmax()
    assert predictor.loaded
    np.testing.assert_array_equal(predictor.run(rec_batches[0]), argmax_pairs(probs))
