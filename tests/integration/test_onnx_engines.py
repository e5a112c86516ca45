"""The CPU engines read the same text as Paddle: ONNX Runtime and OpenVINO (f32) on the
converted PP-OCRv5 models, on real document pages and the synthetic test images, in process and
through the server's device workers with pages batched together. The server's test reads the
synthetic pages, the real ones being read in process (2026-12-07, for the suite's time)."""

from __future__ import annotations

import base64
import concurrent.futures
import dataclasses
from collections.abc import Iterator

import numpy as np
import pytest
from starlette.testclient import TestClient

from serving.app import build_app
from serving.config import AppConfig, EngineConfig, PaddlexConfig, WorkersConfig
from serving.convert import pdf_pages as pages
from serving.engine.local import LocalEngine
from serving.service.runtime import Runtime
from tests import images
from tests.conftest import ONE_SET
from tests.integration.conftest import wait_ready
from tests.local_client import local_client

PADDLE_REFERENCE = "paddle-reference"
"""This file's xdist group, which test_onnx_engines.py and test_torch_engine.py share: Paddle's
texts of the test pages (session fixtures) are read once, on one worker."""
pytestmark = pytest.mark.xdist_group(PADDLE_REFERENCE)

ONNX_ENGINES = ("openvino", "onnxruntime")


SYNTHETIC = ("latin", "chinese", "dense-top")
"""The names of `test_pages`' synthetic pages; the others are real pages, named by their label."""

DENSE_TOP_LINES = 16
"""The dense page's first 16 lines (two headings and their body lines, the page's full width),
not all 40: Paddle alone took 12.5 CPU seconds for the whole page here, each other engine 5,
and five engines read it (2026-12-07, for the suite's time). The two real pages are as dense;
test_ocr_vs_paddleocr.py reads the whole dense page against PaddleOCR itself."""


@pytest.fixture(scope="session")
def test_pages() -> dict[str, np.ndarray]:
    chosen = {
        "latin": images.latin_lines().image,
        "chinese": images.chinese_lines().image,
        "dense-top": images.dense_page_top(DENSE_TOP_LINES).image,
    }
    for pdf in pages.find_real_pdfs()[:2]:
        chosen.update((page.label, page.image) for page in pages.text_pages(pdf, 1))
    assert len(chosen) == 5, "run scripts/system-deps.sh to install the Debian doc PDFs"
    return chosen


def _config(backend: str, onnx_dir: str, openvino_precision: str = "f32") -> AppConfig:
    """OpenVINO at f32 unless asked: these tests compare its text with Paddle's."""
    return AppConfig(
        models=ONE_SET,
        engine=dataclasses.replace(
            EngineConfig(),
            cpu_backend=backend,
            cpu_threads=2,
            onnx_dir=onnx_dir,
            openvino_precision=openvino_precision,
        ),
        workers=dataclasses.replace(
            WorkersConfig(), cpu_workers=2, devices=("cpu",), cpu_instances=1
        ),
        paddlex=PaddlexConfig(visualize=False),
    )


def _read(config: AppConfig, test_pages: dict[str, np.ndarray]) -> dict[str, list[str]]:
    engine = LocalEngine(config)
    engine.load()
    return {name: [ln.text for ln in engine.ocr(img).lines] for name, img in test_pages.items()}


@pytest.fixture(scope="session")
def paddle_texts(onnx_dir: str, test_pages: dict[str, np.ndarray]) -> dict[str, list[str]]:
    texts = _read(_config("paddle", onnx_dir), test_pages)
    assert sum(len(t) for t in texts.values()) > 80, "the pages should have text"
    return texts


@pytest.mark.parametrize("backend", ONNX_ENGINES)
def test_engine_reads_what_paddle_reads(
    backend: str,
    onnx_dir: str,
    test_pages: dict[str, np.ndarray],
    paddle_texts: dict[str, list[str]],
) -> None:
    texts = _read(_config(backend, onnx_dir), test_pages)
    for name in test_pages:
        assert texts[name] == paddle_texts[name], name


@pytest.fixture(scope="module")
def openvino_client(onnx_dir: str) -> Iterator[TestClient]:
    runtime = Runtime.build(_config("openvino", onnx_dir), jobs=False)
    with local_client(build_app(runtime)) as client:
        wait_ready(client)
        yield client


def test_openvino_server_batches_pages_and_reads_what_paddle_reads(
    openvino_client: TestClient,
    test_pages: dict[str, np.ndarray],
    paddle_texts: dict[str, list[str]],
) -> None:
    # The synthetic pages, all at once: rec batches hold crops of several requests.
    names = list(SYNTHETIC)
    bodies = {name: images.encode_png(test_pages[name]) for name in names}

    def post(name: str) -> list[str]:
        body = {"file": base64.b64encode(bodies[name]).decode(), "fileType": 1}
        response = openvino_client.post("/ocr", json=body)
        assert response.status_code == 200, response.text
        return list(response.json()["result"]["ocrResults"][0]["prunedResult"]["rec_texts"])

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        texts = list(pool.map(post, names))
    for name, got in zip(names, texts, strict=True):
        assert got == paddle_texts[name], name
    metrics = openvino_client.get("/metrics").text
    assert 'ocr_batch_size_bucket{device="cpu",le="6.0",stage="rec"}' in metrics
