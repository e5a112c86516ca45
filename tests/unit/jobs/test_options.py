"""Unit tests for serving/jobs/options.py and the jobs API's `options` form field."""

from __future__ import annotations

from typing import Any

import pytest

from serving.errors import ValidationFailed
from serving.jobs.options import options_from_json, parse_options


def test_options_are_converted_and_keep_their_names() -> None:
    options = parse_options(
        {"det_limit_side_len": "960", "det_thresh": 0.5, "det_limit_type": "max"}
    )
    assert options == {"det_limit_side_len": 960, "det_thresh": 0.5, "det_limit_type": "max"}


# Found by test_properties_requests.py: each was a 500 when a job was submitted, or failed its
# pages in the CPU worker.
@pytest.mark.parametrize(
    "raw",
    [
        {"score_thresh": 10**400},  # OverflowError in float()
        {"det_unclip_ratio": "nan"},
        {"det_unclip_ratio": -3},
        {"det_thresh": "inf"},
        {"det_limit_side_len": 0},
    ],
)
def test_options_out_of_range_are_refused(raw: dict[str, Any]) -> None:
    with pytest.raises(ValidationFailed):
        parse_options(raw)


@pytest.mark.parametrize("text", ["[" * 100_000, '{"det_thresh": ' + "1" * 4301 + "}", "{"])
def test_options_field_that_is_not_json_is_refused(text: str) -> None:
    with pytest.raises(ValidationFailed, match="not JSON"):
        options_from_json(text)
