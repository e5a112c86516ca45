"""A CPU device worker's models compiled a second time for a batch it runs alone (issue 28: a
lone page uses the whole machine), with the real converted models: OpenVINO compiles them for
the threads asked, and a real page read alone has the text it has in company.

The decision to run alone: tests/unit/workers/test_device_pool.py; the worker's memory with two
compiled detectors: tests/unit/engine/test_engine_memory.py; a server's lone page:
tests/e2e/test_scheduling.py.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from models.openvino_backend import OpenVinoPredictor
from pipelines.ocr import run_page
from pipelines.types import ClsParams
from serving.config import AppConfig, EngineConfig
from serving.convert import pdf_pages as pages
from serving.engine.choice import engine_choice, model_stages
from serving.engine.local import LocalEngine
from serving.request_options import ocr_options
from tests.conftest import ONE_SET

pytest.importorskip("openvino")


def _config(onnx_dir: str, lone_threads: int) -> AppConfig:
    return AppConfig(
        models=ONE_SET,
        engine=EngineConfig(
            cpu_backend="openvino",
            cpu_threads=1,
            cpu_lone_threads=lone_threads,
            onnx_dir=onnx_dir,
            openvino_precision="f32",
        ),
    )


@pytest.fixture(scope="module")
def page() -> np.ndarray:
    (first,) = pages.text_pages(pages.find_real_pdfs()[0], 1)
    return first.image


def _predictors(config: AppConfig) -> dict[str, Any]:
    engine = LocalEngine(config)
    choice = engine_choice(config, "cpu", alone=True)  # as a server's device worker
    predictors = {stage: choice.predictor(spec) for stage, spec in engine.bundle.specs.items()}
    for predictor in predictors.values():
        predictor.load()
    return predictors


@pytest.fixture(scope="module")
def lone_predictors(onnx_dir: str) -> dict[str, Any]:
    """A device worker's models with 2 lone threads, compiled once for both tests."""
    return _predictors(_config(onnx_dir, 2))


def test_a_worker_compiles_its_models_for_the_lone_threads_too(
    onnx_dir: str, lone_predictors: dict[str, Any]
) -> None:
    assert {s: p.threads for s, p in lone_predictors.items()} == {"det": (1, 2), "rec": (1, 2)}
    predictors = _predictors(_config(onnx_dir, 1))  # 1: never alone, one model
    assert {s: p.threads for s, p in predictors.items()} == {"det": (1,), "rec": (1,)}
    # In process (the engine limit, the offline CLI) nothing runs alone: one model each.
    engine = LocalEngine(_config(onnx_dir, 2))
    engine.load()
    assert all(
        isinstance(p, OpenVinoPredictor) and p.threads == (1,) for p in engine.predictors.values()
    )


def test_a_page_read_alone_has_the_text_it_has_in_company(
    onnx_dir: str, page: np.ndarray, lone_predictors: dict[str, Any]
) -> None:
    config = _config(onnx_dir, 2)
    predictors = lone_predictors
    engine = LocalEngine(config)
    options = ocr_options(engine.bundle, config.pipeline)

    def read(alone: bool) -> list[str]:
        def call(stage: str) -> Any:
            predictor = predictors[stage]
            return predictor.run_alone if alone else predictor.run

        result = run_page(
            page,
            det=call("det"),
            rec=call("rec"),
            cls=None,
            det_params=options.det,
            rec_params=options.rec,
            cls_params=ClsParams(),
            charset=engine.bundle.charset,
            stages=model_stages(predictors),
        )
        return [line.text for line in result.lines]

    in_company = read(alone=False)
    assert len(in_company) > 10
    assert read(alone=True) == in_company
