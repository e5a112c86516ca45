"""Unit tests for serving/request_options.py: the native API's option names, `/v1/ocr`'s
query parameters and the classifier check."""

from __future__ import annotations

import types
from typing import cast

import pytest

from models.bundle import ModelBundle
from serving.config import PipelineConfig
from serving.errors import ValidationFailed
from serving.options import check_overrides
from serving.request_options import (
    NO_CLASSIFIER,
    parse_flag,
    query_overrides,
    request_options,
)


def test_query_parameters_become_overrides_and_others_are_ignored() -> None:
    params = {"det_limit_side_len": "736", "det_thresh": "0.4", "det_limit_type": "max", "x": "1"}
    assert query_overrides(params) == {
        "det_limit_side_len": 736,
        "det_thresh": 0.4,
        "det_limit_type": "max",
    }


@pytest.mark.parametrize(
    ("text", "flag"),
    [("1", True), ("true", True), ("True", True), ("0", False), ("false", False), ("FALSE", False)],
)
def test_a_flag_is_true_or_1_false_or_0_in_any_case(text: str, flag: bool) -> None:
    assert query_overrides({"textline_orientation": text}) == {"textline_orientation": flag}


@pytest.mark.parametrize("text", ["yes", "no", "", "2", "on"])
def test_any_other_flag_is_refused_with_its_name(text: str) -> None:
    """`words=yes` used to count as false without a word."""
    with pytest.raises(ValidationFailed, match=r"^textline_orientation must be true or false"):
        query_overrides({"textline_orientation": text})
    with pytest.raises(ValidationFailed, match=rf"^words must be true or false .*got {text!r}"):
        parse_flag("words", text)


@pytest.mark.parametrize(
    ("name", "value"),
    [("det_thresh", 2.0), ("det_thresh", -0.1), ("det_box_thresh", 1.5), ("score_thresh", -1.0)],
)
def test_thresholds_are_probabilities(name: str, value: float) -> None:
    """`det_thresh=2` was accepted and read nothing."""
    with pytest.raises(ValidationFailed, match=rf"^{name} must be a number in \[0.0, 1.0\]"):
        check_overrides({name: value})
    check_overrides({name: 0.0})
    check_overrides({name: 1.0})


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
    overrides = {"textline_orientation": True}
    with pytest.raises(ValidationFailed) as refused:
        request_options(bundle, PipelineConfig(), overrides, no_classifier=NO_CLASSIFIER)
    assert refused.value.message == NO_CLASSIFIER
