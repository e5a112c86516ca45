"""The OpenVINO predictor's public seam for measurements that swap a loaded model's runner
(`loadtest.bench.int8_sensitivity`): `compile_runner` compiles a model as the predictor compiles
its own, `replace_runner` serves the new runner in `run` and `run_alone`."""

from __future__ import annotations

import numpy as np

from models.embedded import resolve_model_dir
from models.engine_options import EngineOptions
from models.onnx_predictor import BatchRunner, import_engine
from models.openvino_backend import OpenVinoPredictor, compile_runner
from models.spec import load_model_spec

CLS = "embedded:ch_ppocr_mobile_v2.0_cls"  # packaged, ONNX, small


def _predictor() -> OpenVinoPredictor:
    spec = load_model_spec(resolve_model_dir(CLS), "cls")
    predictor = OpenVinoPredictor(spec, EngineOptions(cpu_threads=1, openvino_precision="f32"))
    predictor.load()
    return predictor


def test_a_replaced_runner_serves_run_and_run_alone_and_the_old_one_comes_back() -> None:
    predictor = _predictor()
    batch = np.random.default_rng(0).uniform(-1, 1, (2, 3, 48, 192)).astype(np.float32)
    expected = predictor.run(batch)
    calls: list[tuple[int, ...]] = []

    def counting(run: BatchRunner) -> BatchRunner:
        def counted(data: np.ndarray) -> np.ndarray:
            calls.append(data.shape)
            return run(data)

        return counted

    original = predictor.replace_runner(counting)
    np.testing.assert_array_equal(predictor.run(batch), expected)
    np.testing.assert_array_equal(predictor.run_alone(batch), expected)
    assert calls == [batch.shape, batch.shape]
    np.testing.assert_array_equal(original(batch), expected)
    predictor.replace_runner(lambda _: original)
    predictor.run(batch)
    assert len(calls) == 2
    predictor.close()


def test_compile_runner_compiles_a_model_as_the_predictor_does() -> None:
    predictor = _predictor()
    batch = np.random.default_rng(1).uniform(-1, 1, (1, 3, 48, 192)).astype(np.float32)
    ov = import_engine("openvino", "openvino")
    model = ov.Core().read_model(str(predictor.onnx_file))
    run = compile_runner(model, predictor.options, "f32")
    np.testing.assert_allclose(run(batch), predictor.run(batch), rtol=1e-5, atol=1e-6)
    predictor.close()
