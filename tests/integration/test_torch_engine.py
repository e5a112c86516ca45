"""The torch engine (onnx2torch on the converted PP-OCRv5 models) reads the same text as Paddle,
on the CPU: in process, and through the server's device workers with two batches in flight and
pages batched together (the code path GPU workers run, with the CPU lane's synchronous ops).

Each test page is read once by the torch engine at fp32 (2026-12-07, for the suite's time): the
real document pages in process, the synthetic ones through the server. PP-OCRv6 small's test
reads the Latin and Chinese pages and the Latin one turned, not the dense page: the convolutions,
classifiers and orientation it proves run on every page."""

from __future__ import annotations

import base64
import concurrent.futures
import dataclasses
from collections.abc import Iterator

import numpy as np
import pytest
from starlette.testclient import TestClient

from models.base import ArgmaxOutput
from serving.app import build_app
from serving.config import AppConfig, DeviceClassConfig, EngineConfig, PaddlexConfig, WorkersConfig
from serving.engine.local import LocalEngine
from serving.service.runtime import Runtime
from tests import images
from tests.conftest import ONE_SET
from tests.integration.conftest import wait_ready

# The test pages and Paddle's texts of them, shared with the CPU engines' tests (the converted
# models' `onnx_dir` is tests/integration/conftest.py's).
from tests.integration.test_onnx_engines import (
    PADDLE_REFERENCE,
    SYNTHETIC,
    paddle_texts,
    test_pages,
)
from tests.local_client import local_client

pytest.importorskip("torch", reason="the torch extra (make install-test installs it)")

pytestmark = pytest.mark.xdist_group(PADDLE_REFERENCE)  # Paddle's texts read once for both files

__all__ = ["paddle_texts", "test_pages"]


def _config(onnx_dir: str, **workers: object) -> AppConfig:
    return AppConfig(
        models=ONE_SET,
        engine=dataclasses.replace(
            EngineConfig(), cpu_backend="torch", cpu_threads=2, onnx_dir=onnx_dir
        ),
        workers=dataclasses.replace(WorkersConfig(), cpu_workers=2, devices=("cpu",), **workers),
        paddlex=PaddlexConfig(visualize=False),
    )


def test_torch_engine_reads_what_paddle_reads(
    onnx_dir: str, test_pages: dict[str, np.ndarray], paddle_texts: dict[str, list[str]]
) -> None:
    engine = LocalEngine(_config(onnx_dir))
    engine.load()
    # The real document pages (the server's test below reads the synthetic ones).
    real = {name: image for name, image in test_pages.items() if name not in SYNTHETIC}
    assert len(real) == 2
    for name, image in real.items():
        assert [ln.text for ln in engine.ocr(image).lines] == paddle_texts[name], name


def test_rec_answers_the_argmax_of_what_it_computes(onnx_dir: str) -> None:
    """Reduced where the model runs (on a GPU: 8 bytes a step copied back, not 4 a class), the
    recogniser answers exactly the argmax and maximum of its full output."""
    rec = LocalEngine(_config(onnx_dir)).predictors["rec"]
    rec.load()  # alone: `LocalEngine.load` asks for the argmax before loading
    assert isinstance(rec, ArgmaxOutput)
    batch = np.random.default_rng(0).uniform(-1, 1, (3, 3, 48, 320)).astype(np.float32)
    probs = rec.run(batch)
    rec.output_argmax()
    pairs = rec.run(batch)
    assert probs.shape[:2] == pairs.shape[:2]
    assert pairs.shape[2] == 2
    np.testing.assert_array_equal(pairs[..., 0], probs.argmax(-1).astype(np.float32))
    np.testing.assert_array_equal(pairs[..., 1], probs.max(-1))


@pytest.fixture(scope="module")
def torch_client(onnx_dir: str) -> Iterator[TestClient]:
    # Two batches in flight per worker and one queued, as on GPUs: the worker launches the next
    # before it waits for the current one, and the third waits in its pipe.
    cpu = dataclasses.replace(DeviceClassConfig(), inflight_batches=2, queued_batches=1)
    runtime = Runtime.build(_config(onnx_dir, cpu=cpu), jobs=False)
    with local_client(build_app(runtime)) as client:
        wait_ready(client)
        yield client


def test_torch_server_batches_pages_and_reads_what_paddle_reads(
    torch_client: TestClient,
    test_pages: dict[str, np.ndarray],
    paddle_texts: dict[str, list[str]],
) -> None:
    # The synthetic pages, all at once (the real pages are read in process above).
    synthetic = list(SYNTHETIC)
    names = synthetic
    bodies = {name: images.encode_png(test_pages[name]) for name in synthetic}

    def post(name: str) -> list[str]:
        body = {"file": base64.b64encode(bodies[name]).decode(), "fileType": 1}
        response = torch_client.post("/ocr", json=body)
        assert response.status_code == 200, response.text
        return list(response.json()["result"]["ocrResults"][0]["prunedResult"]["rec_texts"])

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        texts = list(pool.map(post, names))
    for name, got in zip(names, texts, strict=True):
        assert got == paddle_texts[name], name
    ready = torch_client.get("/readyz").json()
    assert ready["ready"] is True
    # compile = "auto" (the default) is eager on the CPU, and /readyz says so (issue 40).
    assert ready["devices"]
    for worker in ready["devices"].values():
        assert worker["compile"] == "off", worker
        assert "eager on the CPU" in worker["compile_reason"], worker


def test_torch_reads_pp_ocrv6_small_and_turns_pages_as_openvino_does(
    onnx_dir: str, test_pages: dict[str, np.ndarray]
) -> None:
    """PP-OCRv6 small's SAME-padded convolutions and the packaged text-line classifier's weights
    in Constant nodes (`models.onnx_rewrites`), and the page classifier, on torch: the same lines
    as OpenVINO at f32, on upright pages (Latin and Chinese) and one turned 90 degrees."""
    models = dataclasses.replace(  # the default set, PP-OCRv6 small, alone
        AppConfig().models, cls="embedded:ch_ppocr_mobile_v2.0_cls", sets={}
    )
    assert models.rec == "embedded:PP-OCRv6_small_rec"
    pipeline = dataclasses.replace(AppConfig().pipeline, use_textline_orientation=True)
    pages = {name: test_pages[name] for name in ("latin", "chinese")}
    pages["turned"] = np.ascontiguousarray(np.rot90(next(iter(pages.values()))))
    texts = {}
    for backend in ("torch", "openvino"):
        engine_config = dataclasses.replace(
            _config(onnx_dir).engine, cpu_backend=backend, openvino_precision="f32"
        )
        config = dataclasses.replace(
            _config(onnx_dir), models=models, engine=engine_config, pipeline=pipeline
        )
        engine = LocalEngine(config)
        engine.load()
        assert {"ori", "cls"} <= set(engine.predictors)
        texts[backend] = {
            name: [ln.text for ln in engine.ocr(p).lines] for name, p in pages.items()
        }
    assert texts["torch"] == texts["openvino"]
    assert texts["torch"]["turned"] == texts["torch"][next(iter(pages))]
