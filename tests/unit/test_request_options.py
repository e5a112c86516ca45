"""Unit tests for serving/request_options.py: the native API's option names, `/v1/ocr`'s
query parameters and the classifier check."""

from __future__ import annotations

import types
from typing import cast

import pytest

from models.bundle import ModelBundle
from serving.config import PipelineConfig
from serving.errors import ValidationFailed
from serving.request_options import NO_CLASSIFIER, query_overrides, request_options


def test_query_parameters_become_overrides_and_others_are_ignored() -> None:
    params = {"det_limit_side_len": "736", "det_thresh": "0.4", "det_limit_type": "max", "x": "1"}
    assert query_overrides(params) == {"limit_side_len": 736, "thresh": 0.4, "limit_type": "max"}


@pytest.mark.parametrize(("text", "flag"), [("1", True), ("true", True), ("True", False)])
def test_the_flag_is_true_only_for_1_and_true(text: str, flag: bool) -> None:
    assert query_overrides({"textline_orientation": text}) == {"use_textline_orientation": flag}


def test_numbers_are_read_before_the_limit_type_floats_first() -> None:
    params = {"det_limit_type": "no", "det_limit_side_len": "x", "det_thresh": "abc"}
    with pytest.raises(ValidationFailed, match="could not convert string to float: 'abc'"):
        query_overrides(params)
    with pytest.raises(ValidationFailed, match="invalid literal for int"):
        query_overrides({"det_limit_type": "no", "det_limit_side_len": "x"})
    with pytest.raises(ValidationFailed, match="det_limit_type must be min, max or resize_long"):
        query_overrides({"det_limit_type": "no"})


def test_a_classifier_asked_for_without_a_model_is_refused_in_the_apis_words() -> None:
    bundle = cast(ModelBundle, types.SimpleNamespace(cls=None))
    overrides = {"use_textline_orientation": True}
    with pytest.raises(ValidationFailed) as refused:
        request_options(bundle, PipelineConfig(), overrides, no_classifier=NO_CLASSIFIER)
    assert refused.value.message == NO_CLASSIFIER
