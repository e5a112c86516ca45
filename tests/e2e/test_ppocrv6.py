"""`ocr-serve` on PP-OCRv6 small (the rapidocr wheel's ONNX models, `embedded:`; the default set)
alone, on ONNX Runtime: real document pages, English and Chinese, read end to end against their
PDF text layer."""

from __future__ import annotations

from pathlib import Path

import cv2
import httpx
import pytest

from loadtest.accuracy import cer, word_counts
from serving.convert import pdf_pages as pages
from tests.e2e.conftest import Server

# PP-OCRv6 small as the default set, on ONNX Runtime (tests/e2e/profiles.py).
pytestmark = [pytest.mark.e2e, pytest.mark.profile("ppocrv6-onnxruntime")]


@pytest.fixture
def v6_server(server: Server) -> Server:
    return server


def real_page(pdf_name: str) -> tuple[bytes, str]:
    """The first text page (by `select_text_pages`) of a Debian doc PDF: PNG bytes, text layer."""
    (pdf,) = [p for p in pages.find_real_pdfs() if p.name == pdf_name]
    (page,) = pages.text_pages(pdf, 1)
    ok, png = cv2.imencode(".png", page.image)
    assert ok
    return png.tobytes(), page.text


@pytest.mark.parametrize(
    ("pdf_name", "max_cer", "min_word_f1"),
    [
        ("shared-mime-info-spec.pdf", 0.02, 0.95),  # English
        ("maint-guide.zh-cn.pdf", 0.02, 0.95),  # Simplified Chinese with English commands
    ],
)
def test_a_real_page_reads_as_its_text_layer(
    v6_server: Server, pdf_name: str, max_cer: float, min_word_f1: float
) -> None:
    if not any(p.name == pdf_name for p in pages.find_real_pdfs()):
        pytest.fail(f"{pdf_name} missing: run scripts/system-deps.sh")
    png, truth = real_page(pdf_name)
    response = httpx.post(
        f"{v6_server.url}/v1/ocr", content=png, headers={"content-type": "image/png"}, timeout=300
    )
    assert response.status_code == 200, response.text
    text = "\n".join(line["text"] for line in response.json()["pages"][0]["lines"])
    page_cer = cer(truth, text)
    words = word_counts(truth, text)
    print(f"{pdf_name}: CER {page_cer:.4f}, word F1 {words.f1:.4f}")
    assert page_cer < max_cer
    assert words.f1 > min_word_f1


def test_the_server_says_which_models_it_serves(v6_server: Server) -> None:
    log = Path(v6_server.log).read_text()
    assert "PP-OCRv6_small_det" in log
    assert "PP-OCRv6_small_rec" in log
    assert "engine=onnxruntime" in log
