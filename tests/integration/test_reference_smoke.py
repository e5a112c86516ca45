"""Smoke test: the PaddleOCR reference (tests/reference.py) runs offline on the embedded models."""

from __future__ import annotations

import pytest

from tests import images
from tests.reference import DET_MODEL_NAME, REC_MODEL_NAME, embedded_model_dir, reference_ocr

pytestmark = pytest.mark.integration


def test_embedded_models_are_present() -> None:
    for name in (DET_MODEL_NAME, REC_MODEL_NAME):
        path = embedded_model_dir(name)
        assert (path / "inference.json").is_file()
        assert (path / "inference.yml").is_file()


def test_reference_reads_latin_lines() -> None:
    image, truth = images.latin_lines()
    res = reference_ocr(image)
    assert res["rec_texts"] == truth
    assert len(res["rec_scores"]) == len(truth)
    assert min(res["rec_scores"]) > 0.9
    assert len(res["rec_polys"]) == len(res["rec_boxes"]) == len(truth)
    # The boxes come top to bottom, like the lines were drawn.
    tops = [box[1] for box in res["rec_boxes"]]
    assert tops == sorted(tops)


def test_reference_reads_chinese_lines() -> None:
    image, truth = images.chinese_lines()
    assert reference_ocr(image)["rec_texts"] == truth


def test_reference_finds_nothing_on_empty_page() -> None:
    res = reference_ocr(images.empty_page())
    assert res["rec_texts"] == []
    assert len(res["dt_polys"]) == 0
