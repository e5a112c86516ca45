"""`ocr-serve` on the torch engine with shape buckets (issue 27): its models load with their
shape arithmetic on the host (the start-up log says so for det and rec), batches run padded up
to `[engine.torch]`'s buckets and cropped back, and the pages read right. Zero host reads per
forward is counted in tests/integration/test_torch_host_reads.py."""

from __future__ import annotations

import base64
from pathlib import Path

import httpx
import pytest

from loadtest.accuracy import cer
from models import convert
from models.bundle import load_bundle
from serving.config import AppConfig, EngineConfig
from tests import images
from tests.e2e.conftest import Server

pytest.importorskip("torch", reason="the torch extra (make install-test installs it)")

# The torch engine on the CPU, shapes padded to buckets (tests/e2e/profiles.py).
pytestmark = pytest.mark.profile("torch-buckets")


@pytest.fixture(scope="session")
def converted() -> None:
    models = AppConfig().models
    bundle = load_bundle(models.det, models.rec)
    cache = Path(EngineConfig().onnx_dir)  # relative to the repository, as the server's cwd
    root = Path(__file__).parents[2]
    if any(convert.find_onnx(s, root / cache) is None for s in (bundle.det, bundle.rec)):
        pytest.skip(f"no ONNX conversions in {cache}: run {convert.CONVERT_COMMAND}")


@pytest.fixture
def torch_server(converted: None, server: Server) -> Server:
    return server


def test_bucketed_torch_server_reads_the_pages(torch_server: Server) -> None:
    # lang=fr: the PP-OCRv6 small set (SAME-padded convolutions, `models.onnx_rewrites`).
    for page, lang in (
        (images.latin_lines(), ""),
        (images.chinese_lines(), ""),
        (images.latin_lines(), "fr"),
    ):
        body = {"file": base64.b64encode(images.encode_png(page.image)).decode(), "fileType": 1}
        if lang:
            body["lang"] = lang
        response = httpx.post(f"{torch_server.url}/ocr", json=body, timeout=300)
        assert response.status_code == 200, response.text
        texts = response.json()["result"]["ocrResults"][0]["prunedResult"]["rec_texts"]
        # Padding to buckets may change a character; the lines are all there.
        assert len(texts) == len(page.lines)
        assert cer("".join(page.lines), "".join(texts)) < 0.02, texts
    log = torch_server.log.read_text()
    for stage in ("det", "rec"):
        loaded = [ln for ln in log.splitlines() if f"loaded {stage} model=" in ln]
        assert any("PP-OCRv6_small" in ln for ln in loaded), log[-3000:]
        for line in loaded:
            assert "host_reads_free=True compile=off shapes=buckets" in line, line
