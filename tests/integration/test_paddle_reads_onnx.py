"""The Paddle engine reads the default set, PP-OCRv6 small, shipped as ONNX, through its X2Paddle
conversion (`make convert-paddle`, `models.paddle_convert`): on the top half of a real English
page and of a real Chinese one (Debian's maint-guide) it reads the text OpenVINO reads at f32
from the ONNX files, each line's score within 1e-3. Half pages since 2026-12-07, for the suite's
time: Paddle took ~17 of the 23 s the whole pages took here.

Measured with the same comparison on 9 real pages (4 bench pages, one maint-guide page each in
fr, de, es, it, ja; 2026-12-07): the same text on every page from ONNX Runtime, OpenVINO f32 and
Paddle 3.2.2 on X2Paddle 1.6's conversion (docs/models.md, PP-OCRv6 on the Paddle engine).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from models import paddle_convert
from models.bundle import load_bundle
from serving.config import AppConfig, EngineConfig, ModelsConfig
from serving.convert import pdf_pages as pages
from serving.engine.local import LocalEngine


@pytest.fixture(scope="module")
def paddle_dir() -> str:
    """The configured cache, holding PP-OCRv6 small's Paddle conversions (`make convert-paddle`,
    which `make test` runs; converted here when only the converter is there)."""
    cache = Path(EngineConfig().paddle_dir)
    models = ModelsConfig()
    bundle = load_bundle(models.det, models.rec)
    missing = [s for s in (bundle.det, bundle.rec) if paddle_convert.find_paddle(s, cache) is None]
    converter = paddle_convert.default_converter()
    if missing and converter is None:
        pytest.skip(f"no Paddle conversions in {cache}: run {paddle_convert.CONVERT_COMMAND}")
    for spec in missing:
        if converter is not None:
            paddle_convert.convert(spec, cache, converter)
    return str(cache)


def _texts(backend: str, paddle_dir: str, page_images: dict[str, np.ndarray]) -> dict[str, list]:
    models = dataclasses.replace(ModelsConfig(), ori="", sets={})  # PP-OCRv6 small alone
    engine = EngineConfig(
        cpu_backend=backend, cpu_threads=2, openvino_precision="f32", paddle_dir=paddle_dir
    )
    local = LocalEngine(AppConfig(models=models, engine=engine))
    local.load()
    return {
        name: [(line.text, line.score) for line in local.ocr(image).lines]
        for name, image in page_images.items()
    }


def test_the_paddle_engine_reads_ppocrv6_small_as_the_onnx_engines_do(paddle_dir: str) -> None:
    page_images = {}
    for pdf in pages.find_real_pdfs():
        if pdf.name.startswith("maint-guide."):  # English, Chinese
            page_images.update(
                (page.label, page.image[: page.image.shape[0] // 2])
                for page in pages.text_pages(pdf, 1)
            )
    assert len(page_images) == 2, "run scripts/system-deps.sh to install the Debian doc PDFs"
    paddle = _texts("paddle", paddle_dir, page_images)
    openvino = _texts("openvino", paddle_dir, page_images)
    assert sum(len(lines) for lines in paddle.values()) > 20, "the pages should have text"
    for name in page_images:
        assert [text for text, _ in paddle[name]] == [text for text, _ in openvino[name]], name
        np.testing.assert_allclose(
            [score for _, score in paddle[name]], [score for _, score in openvino[name]], atol=1e-3
        )
