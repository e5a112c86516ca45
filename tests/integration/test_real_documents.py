"""Accuracy on real documents nobody here wrote: our CER is not worse than PaddleOCR's on the same
models, PP-OCRv5 mobile (named: the default set is PP-OCRv6 small, whose own check against a
PaddleOCR-processing reference is test_faithful_v6.py), at the default "auto" precision."""

from __future__ import annotations

import pytest

from loadtest.accuracy import evaluate
from serving.config import AppConfig
from serving.convert import pdf_pages as pages
from serving.engine.local import LocalEngine
from tests.conftest import ONE_SET
from tests.reference import reference_ocr


@pytest.fixture(scope="module")
def real_pages() -> list[tuple[str, object, str]]:
    pdfs = pages.find_real_pdfs()
    assert len(pdfs) >= 2, "run scripts/system-deps.sh to install the Debian doc PDFs"
    chosen = []
    for pdf in pdfs:
        # One page with real text from each document, English and Chinese.
        (index,) = pages.select_text_pages(pdf, 1)
        (image,) = pages.render_pdf_pages(pdf, dpi=150, first=index, count=1)
        chosen.append((f"{pdf.name}:p{index + 1}", image, pages.pdf_page_text(pdf, index)))
    return chosen


def test_cer_not_worse_than_paddleocr(real_pages) -> None:
    samples = [(image, truth) for _, image, truth in real_pages]
    labels = [label for label, _, _ in real_pages]
    engine = LocalEngine(AppConfig(models=ONE_SET))
    engine.load()
    mine = evaluate(samples, lambda img: [ln.text for ln in engine.ocr(img).lines], labels=labels)
    reference = evaluate(samples, lambda image: reference_ocr(image)["rec_texts"], labels=labels)
    for m, r in zip(mine.pages, reference.pages, strict=True):
        print(f"{m.label}: ours {m.cer:.4f} paddleocr {r.cer:.4f}")
    assert reference.cer < 0.2, "the reference itself should read these pages"
    assert mine.cer <= reference.cer + 0.001
