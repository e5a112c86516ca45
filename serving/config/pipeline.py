"""`[pipeline]`: the OCR pipeline's defaults, which requests may override (`serving.options`:
each option's range holds for its default too)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from pipelines.types import LIMIT_TYPES, DetParams, LimitType
from serving.config.checks import check
from serving.options import (
    OPTIONS,
    ORIENTATION_MODES,
    OrientationMode,
    choices_text,
    in_range,
    range_text,
)


def check_ranges(section: object, name: str) -> None:
    """Check the defaults in `[pipeline.<name>]` (`section`) of the request options that have a
    range (`serving.options.OPTIONS`): a default must be a value a request could send."""
    for option_name, option in OPTIONS.items():
        where, _, key = option.default.partition(".")
        if option.bounds is not None and where == name:
            ok = in_range(option_name, getattr(section, key))
            check(ok, f"pipeline.{option.default}", f"must be {range_text(option_name)}")


_DET = DetParams()


@dataclass(frozen=True, slots=True, kw_only=True)
class DetPipelineConfig:
    """Detection defaults (PaddleOCR 3.7's OCR pipeline, as `DetParams`); requests may override
    them."""

    limit_side_len: int = _DET.limit_side_len
    limit_type: LimitType = _DET.limit_type
    max_side_limit: int = _DET.max_side_limit
    thresh: float = _DET.thresh
    box_thresh: float = _DET.box_thresh
    unclip_ratio: float = _DET.unclip_ratio

    def __post_init__(self) -> None:
        check(
            self.limit_type in LIMIT_TYPES,
            "pipeline.det.limit_type",
            f"must be {choices_text(LIMIT_TYPES)}",
        )
        check(self.max_side_limit >= 32, "pipeline.det.max_side_limit", "must be >= 32")
        check_ranges(self, "det")


@dataclass(frozen=True, slots=True, kw_only=True)
class RecPipelineConfig:
    """Recognition defaults."""

    batch_size: int = 6
    """Crops of one page padded together, as PaddleOCR; results depend on it."""
    score_thresh: float = 0.0

    def __post_init__(self) -> None:
        check(self.batch_size > 0, "pipeline.rec.batch_size", "must be > 0")
        check_ranges(self, "rec")


@dataclass(frozen=True, slots=True, kw_only=True)
class PipelineConfig:
    """OCR pipeline defaults."""

    use_textline_orientation: bool = False
    """Run the classifier when one is configured and the request does not say."""
    orientation: OrientationMode = "auto"
    """Page orientation when the request does not say: "auto" classifies each page and reads a
    page found turned upright (`models.ori` must be set), "off" reads pages as sent."""
    orientation_min_score: float = 0.6
    """A page is turned only when the classifier's probability is at least this."""
    det: DetPipelineConfig = field(default_factory=DetPipelineConfig)
    rec: RecPipelineConfig = field(default_factory=RecPipelineConfig)

    def __post_init__(self) -> None:
        check(
            self.orientation in ORIENTATION_MODES,
            "pipeline.orientation",
            f"must be {choices_text(ORIENTATION_MODES)}",
        )
        check(
            math.isfinite(self.orientation_min_score) and 0 <= self.orientation_min_score <= 1,
            "pipeline.orientation_min_score",
            "must be a number in [0, 1]",
        )
