"""`[pipeline]`: the OCR pipeline's defaults, which requests may override within
`PIPELINE_RANGES`."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

from pipelines.types import LIMIT_TYPES, DetParams, LimitType
from serving.config.checks import check, choices_text

PIPELINE_RANGES: dict[str, tuple[float, float]] = {
    "limit_side_len": (1, 100_000),
    "thresh": (0.0, 1.0),
    "box_thresh": (0.0, 1.0),
    "unclip_ratio": (0.0, 100.0),
    "score_thresh": (0.0, 1.0),
}
"""Pipeline settings -> the closed range a config value or request override must be in; NaN and
infinities never are. Past these the CPU worker fails (a negative unclip ratio: cv2.error; a side
limit past float range: OverflowError), runs out of memory (unclip_ratio=1e14 offsets each box by
~1e15 px with round joins), or answers NaN, which is not JSON. The thresholds are probabilities
(the detector's map, a box's mean, a line's score): `det_thresh=2` read nothing, without a word."""


def in_range(name: str, value: Any) -> bool:
    """Whether `value` is a finite number within `PIPELINE_RANGES[name]`."""
    low, high = PIPELINE_RANGES[name]
    try:
        return math.isfinite(value) and low <= value <= high
    except OverflowError:  # an int past float range
        return False


def range_text(name: str) -> str:
    """`PIPELINE_RANGES[name]` in words, for error messages."""
    low, high = PIPELINE_RANGES[name]
    return "a finite number" if math.isinf(low) else f"a number in [{low}, {high}]"


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
        for name in ("limit_side_len", "thresh", "box_thresh", "unclip_ratio"):
            path = f"pipeline.det.{name}"
            check(in_range(name, getattr(self, name)), path, f"must be {range_text(name)}")


@dataclass(frozen=True, slots=True, kw_only=True)
class RecPipelineConfig:
    """Recognition defaults."""

    batch_size: int = 6
    """Crops of one page padded together, as PaddleOCR; results depend on it."""
    score_thresh: float = 0.0

    def __post_init__(self) -> None:
        check(self.batch_size > 0, "pipeline.rec.batch_size", "must be > 0")
        score_ok = in_range("score_thresh", self.score_thresh)
        check(score_ok, "pipeline.rec.score_thresh", f"must be {range_text('score_thresh')}")


OrientationMode = Literal["auto", "off"]
ORIENTATION_MODES: tuple[OrientationMode, ...] = ("auto", "off")


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
