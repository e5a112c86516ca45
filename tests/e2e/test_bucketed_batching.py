"""`ocr-serve` with `[engine] batching = "bucketed"` on the real OpenVINO engine: three pages sent
at once read as well as exact mode reads them in process (CER within 0.1 points), and the server's
own metrics show a recognition batch that held rows of more than one page."""

from __future__ import annotations

import base64
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from loadtest.accuracy import char_edits
from models import convert
from models.bundle import load_bundle
from serving.config import AppConfig, EngineConfig
from serving.engine.local import LocalEngine
from tests import images
from tests.e2e.conftest import Server

# `[engine] batching = "bucketed"`, the GPU class's batch limits (tests/e2e/profiles.py).
pytestmark = pytest.mark.profile("bucketed")


@pytest.fixture(scope="session")
def converted() -> None:
    models = AppConfig().models
    bundle = load_bundle(models.det, models.rec)
    cache = Path(EngineConfig().onnx_dir)  # relative to the repository, as the server's cwd
    root = Path(__file__).parents[2]
    if any(convert.find_onnx(s, root / cache) is None for s in (bundle.det, bundle.rec)):
        pytest.skip(f"no ONNX conversions in {cache}: run {convert.CONVERT_COMMAND}")


@pytest.fixture
def bucketed_server(converted: None, server: Server) -> Server:
    return server


def _read(server: Server, png: bytes) -> list[str]:
    body = {"file": base64.b64encode(png).decode(), "fileType": 1}
    response = httpx.post(f"{server.url}/ocr", json=body, timeout=600)
    assert response.status_code == 200, response.text
    texts: list[str] = response.json()["result"]["ocrResults"][0]["prunedResult"]["rec_texts"]
    return texts


def _cer(truths: list[list[str]], readings: list[list[str]]) -> float:
    edits = chars = 0
    for truth, read in zip(truths, readings, strict=True):
        e, n = char_edits("\n".join(truth), "\n".join(read))
        edits, chars = edits + e, chars + n
    return edits / chars


def _batch_pages(metrics: str, stage: str) -> tuple[float, float]:
    """(batches, batches of one page) of `ocr_batch_pages` for `stage`, all devices."""
    batches = one_page = 0.0
    for family in text_string_to_metric_families(metrics):
        if family.name != "ocr_batch_pages":
            continue
        for sample in family.samples:
            if sample.labels.get("stage") != stage:
                continue
            if sample.name.endswith("_count"):
                batches += sample.value
            elif sample.name.endswith("_bucket") and sample.labels["le"] == "1.0":
                one_page += sample.value
    return batches, one_page


def test_bucketed_server_reads_as_exact_mode_and_fills_batches_across_pages(
    bucketed_server: Server,
) -> None:
    pages = [images.dense_page(seed, n_lines=8) for seed in range(3)]
    pngs = [images.encode_png(page.image) for page in pages]
    with ThreadPoolExecutor(len(pngs)) as pool:  # at once: their rows may share batches
        readings = list(pool.map(lambda png: _read(bucketed_server, png), pngs))
    engine = LocalEngine(AppConfig())  # exact mode, in this process, on the same engine
    engine.load()
    exact = [[line.text for line in engine.ocr(page.image).lines] for page in pages]
    truths = [page.lines for page in pages]
    assert _cer(truths, readings) <= _cer(truths, exact) + 0.001, (readings, exact)
    metrics = httpx.get(f"{bucketed_server.url}/metrics", timeout=30).text
    batches, one_page = _batch_pages(metrics, "rec")
    assert batches > 0
    assert one_page < batches, "no recognition batch held rows of more than one page"
    described = httpx.get(f"{bucketed_server.url}/readyz", timeout=30).json()
    assert described["batching"] == "bucketed"
