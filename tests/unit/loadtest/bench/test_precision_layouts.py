"""The precision-layout bench's own logic: layouts as written on its command line, and which
language a page counts for. The layouts on real OpenVINO: tests/integration/
test_openvino_precision_models.py (the served ones); the measurement itself: docs/performance.md."""

from __future__ import annotations

import pytest

from loadtest.bench.precision_layouts import Layout, language

pytestmark = pytest.mark.unit


def test_a_layout_is_det_slash_rec_and_a_bang_is_every_layer() -> None:
    assert Layout.parse("bf16/f32") == Layout("bf16", "f32", rec_f32_head=True)
    assert Layout.parse("bf16/bf16!") == Layout("bf16", "bf16", rec_f32_head=False)
    assert str(Layout.parse("bf16/bf16!")) == "bf16/bf16!"
    assert str(Layout.parse("f32/bf16")) == "f32/bf16"
    assert Layout.parse("int8/f32") == Layout("int8", "f32")
    for bad in ("fp16/f32", "bf16", "bf16/int4", "/f32"):
        with pytest.raises(ValueError, match="det/rec of f32, bf16, int8"):
            Layout.parse(bad)


def test_pages_count_for_their_language() -> None:
    assert language("maint-guide.zh-cn-p12") == "zh"
    assert language("libtasn1-p3") == "en"
    assert language("synthetic:latin") == "synthetic"
