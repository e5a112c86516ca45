"""`ocr-batch --ray`'s row functions and model actors, chained in process with the real models:
the result equals the in-process engine's, and a bad page carries its error to the end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from models.bundle import load_bundle
from serving.batch import ray_stages
from serving.batch.ray_stages import ModelActor, PageSettings, Row
from serving.config import AppConfig
from serving.decode.documents import decode_page
from serving.decode.readers import DecodeLimits
from serving.engine.local import LocalEngine
from serving.request_options import ocr_options
from tests import images

LIMITS = DecodeLimits(max_pdf_pages=10, pdf_render_scale=2.0, max_image_pixels=50_000_000)


@pytest.fixture(scope="module")
def chain() -> tuple[PageSettings, ModelActor, ModelActor]:
    config = ray_stages.cpu_threads_config(AppConfig(), 2)
    bundle = load_bundle(config.models.det, config.models.rec, config.models.cls)
    settings = PageSettings(
        limits=LIMITS, options=ocr_options(bundle, config.pipeline), charset=bundle.charset
    )
    return settings, ModelActor(config, "det", "cpu"), ModelActor(config, "rec", "cpu")


def _run(row: Row, chain: tuple[PageSettings, ModelActor, ModelActor]) -> Row:
    settings, det, rec = chain
    row = ray_stages.decode(row, settings)
    row = det(row)
    row = ray_stages.after_det(row, settings)
    row = rec(row)
    return ray_stages.finish(row, settings)


def test_a_pdf_page_equals_the_in_process_engine(tmp_path: Path, chain) -> None:
    latin, chinese = images.latin_lines(), images.chinese_lines()
    pdf = tmp_path / "doc.pdf"
    pdf.write_bytes(images.make_pdf([latin.image, chinese.image], dpi=144.0))
    row = _run(ray_stages.page_row("doc.pdf", "ab" * 32, str(pdf), "pdf", 1), chain)

    assert set(row) == {"name", "sha256", "path", "kind", "page", *ray_stages.OUTPUT_COLUMNS}
    assert (row["error_code"], row["error_message"]) == ("", "")
    record = json.loads(row["record"])
    engine = LocalEngine(AppConfig())
    engine.load()
    expected = engine.ocr(decode_page(pdf, "pdf", 1, LIMITS))
    assert [ln["text"] for ln in record["lines"]] == [ln.text for ln in expected.lines]
    assert [ln["box"] for ln in record["lines"]] == [ln.poly.tolist() for ln in expected.lines]
    assert (record["file"], record["page"], record["sha256"]) == ("doc.pdf", 1, "ab" * 32)
    assert (record["width"], record["height"]) == (expected.width, expected.height)
    assert len(record["lines"]) == len(chinese.lines)


def test_a_page_that_does_not_decode_carries_its_error_through(tmp_path: Path, chain) -> None:
    bad = tmp_path / "bad.png"
    bad.write_bytes(images.encode_png(images.latin_lines().image)[:200])  # cut short
    row = _run(ray_stages.page_row("bad.png", "cd" * 32, str(bad), "image", 0), chain)

    assert row["record"] == ""
    assert row["error_code"] == "invalid_input"
    assert row["error_message"]
    assert "image" not in row
    assert "step" not in row
