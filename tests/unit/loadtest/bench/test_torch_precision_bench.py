"""The torch precision bench's layouts as written on its command line."""

from __future__ import annotations

import argparse

import pytest

from loadtest.bench.torch_precision import parse_layout

pytestmark = pytest.mark.unit


def test_a_layout_is_the_detectors_precision_then_the_recognisers() -> None:
    assert parse_layout("fp16/fp32") == ("fp16", "fp32")
    assert parse_layout("bf16/bf16") == ("bf16", "bf16")
    for wrong in ("fp16", "fp16/int8", "auto/fp32"):
        with pytest.raises(argparse.ArgumentTypeError, match="DET/REC"):
            parse_layout(wrong)
