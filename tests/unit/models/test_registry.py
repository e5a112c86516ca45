"""The engine seam: backends by name or import path, and the predictors they give each device."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from models.base import ArgmaxOutput, EngineBackend, EngineBackendError
from models.bundle import ModelBundle, load_bundle
from models.engine_options import EngineOptions
from models.fake_predictor import FakePredictor, create_fake_predictor
from models.gpu_predictor import GpuPredictor
from models.paddle_predictor import PaddlePredictor
from models.registry import BACKENDS, EngineChoice, backend_names, get_backend
from serving.config import AppConfig, ModelsConfig
from serving.engine.choice import engine_choice
from serving.engine.local import LocalEngine
from serving.engine.warmup import warm_up_page, warmup_image
from tests.conftest import ONE_SET
from tests.fakes.predictors import SLOW_FAKE

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def bundle() -> ModelBundle:
    """PP-OCRv5 mobile's Paddle models (named: the default set, PP-OCRv6 small, is ONNX)."""
    models = ModelsConfig()
    return load_bundle(ONE_SET.det, ONE_SET.rec, models.cls)


def test_paddle_and_fake_are_registered_for_both_device_kinds() -> None:
    assert {"paddle", "torch", "fake"} <= set(backend_names())
    assert {"paddle", "torch", "fake"} <= set(backend_names("gpu"))
    assert BACKENDS["torch"].formats == frozenset({"onnx"})
    assert BACKENDS["paddle"].formats == frozenset({"paddle"})
    assert BACKENDS["fake"].formats == frozenset({"paddle", "onnx"})


def test_backends_by_name_or_import_path() -> None:
    assert get_backend("paddle") is BACKENDS["paddle"]
    assert get_backend("tests.fakes.predictors:SLOW_FAKE") is SLOW_FAKE
    with pytest.raises(EngineBackendError, match="unknown engine backend 'onnx': one of paddle"):
        get_backend("onnx")
    with pytest.raises(EngineBackendError, match="is a function, not an EngineBackend"):
        get_backend("models.paddle_backend:create_paddle_predictor")
    with pytest.raises(EngineBackendError, match="cannot import"):
        get_backend("tests.fakes.no_such_module:X")


def test_paddle_gives_each_device_its_own_predictor_class(bundle: ModelBundle) -> None:
    cpu = EngineChoice(backend="paddle", options=EngineOptions(cpu_threads=2))
    on_cpu = cpu.predictor(bundle.det)
    assert isinstance(on_cpu, PaddlePredictor)
    assert on_cpu.options == cpu.options  # nothing sized or replaced without a batch bound
    gpu_options = EngineOptions(device="gpu:1", precision="fp16", use_tensorrt=True)
    on_gpu = EngineChoice(backend="paddle", options=gpu_options).predictor(
        bundle.rec, max_batch_rows=96
    )
    assert isinstance(on_gpu, GpuPredictor)  # constructed only: nothing loaded, no paddle needed
    assert on_gpu.options == dataclasses.replace(gpu_options, trt_max_batch_size=96)


def test_a_backend_refuses_devices_and_formats_it_does_not_serve(bundle: ModelBundle) -> None:
    cpu_only = EngineBackend(
        name="cpu-only",
        devices=frozenset({"cpu"}),
        formats=frozenset({"onnx"}),
        create=create_fake_predictor,
    )
    with pytest.raises(EngineBackendError, match="does not run on gpu devices"):
        cpu_only.predictor(bundle.det, EngineOptions(device="gpu:0"))
    with pytest.raises(EngineBackendError, match="does not read paddle models"):
        cpu_only.predictor(bundle.det, EngineOptions())


def test_the_fake_answers_in_the_shape_of_the_models_labels(bundle: ModelBundle) -> None:
    fake = EngineChoice(backend="fake", options=EngineOptions()).predictor(bundle.rec)
    assert isinstance(fake, FakePredictor)
    fake.load()
    out = fake.run(np.zeros((2, 3, 48, 320), dtype=np.float32))
    assert out.shape == (2, 40, len(bundle.charset))


@pytest.mark.parametrize("rec_prob", [0.95, 1e-9])
def test_the_fakes_argmax_pairs_are_those_of_its_full_output(rec_prob: float) -> None:
    full = FakePredictor("rec", rec_indices=(3, 7, 3), rec_prob=rec_prob, num_classes=50)
    reduced = FakePredictor("rec", rec_indices=(3, 7, 3), rec_prob=rec_prob, num_classes=50)
    assert isinstance(reduced, ArgmaxOutput)
    reduced.output_argmax()
    full.load()
    reduced.load()
    batch = np.zeros((2, 3, 48, 96), dtype=np.float32)
    probs, pairs = full.run(batch), reduced.run(batch)
    assert pairs.shape == (2, 12, 2)
    np.testing.assert_array_equal(pairs[..., 0], probs.argmax(-1).astype(np.float32))
    np.testing.assert_array_equal(pairs[..., 1], probs.max(-1))


def test_the_fake_backend_runs_the_whole_page_in_process() -> None:
    config = AppConfig()
    config = dataclasses.replace(
        config, engine=dataclasses.replace(config.engine, cpu_backend="fake")
    )
    assert engine_choice(config, "cpu").backend == "fake"
    engine = LocalEngine(config)
    assert all(isinstance(p, FakePredictor) for p in engine.predictors.values())
    engine.load()
    page = engine.ocr(warmup_image())
    assert [line.text for line in page.lines] == [engine.bundle.charset[1]]
    assert warm_up_page(engine.predictors, engine.bundle.model_dirs) == [engine.bundle.charset[1]]
