"""Readiness checks the warm-up page's text: an engine that reads wrong never turns ready."""

from __future__ import annotations

import pytest

from models.fake_predictor import FakePredictor
from serving.engine.warmup import WARMUP_TEXT, WarmupMismatch, check_warmup_texts

REAL = {"det": object(), "rec": object()}


def test_the_right_text_passes() -> None:
    check_warmup_texts(list(WARMUP_TEXT), REAL)


def test_one_changed_character_passes() -> None:
    # fp16 on a GPU may change a character (PP-OCRv5: 1 in 12 lines).
    check_warmup_texts(["Warm-up page 2O26", WARMUP_TEXT[1]], REAL)


@pytest.mark.parametrize(
    "texts",
    [[], [WARMUP_TEXT[0]], ["一丁丂七丄丅", "丆万丈三上下"], [*WARMUP_TEXT, "extra"], ["", ""]],
)
def test_wrong_text_is_refused_with_what_was_read(texts: list[str]) -> None:
    with pytest.raises(WarmupMismatch, match="warm-up page read"):
        check_warmup_texts(texts, REAL)


def test_model_free_fakes_and_partial_workers_are_not_checked() -> None:
    check_warmup_texts(["x"], {"det": FakePredictor("det"), "rec": FakePredictor("rec")})
    check_warmup_texts([], {"rec": object()})
