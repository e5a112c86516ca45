"""Per-request OCR settings: the config's pipeline defaults, the models' own settings, and the
request's overrides."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from models.bundle import ModelBundle
from pipelines.types import ClsParams, DetParams, RecParams
from serving.config import PIPELINE_RANGES, PipelineConfig, in_range, range_text
from serving.errors import ValidationFailed


@dataclass(frozen=True, slots=True, kw_only=True)
class OcrOptions:
    """Per-request settings, after request overrides were applied to the config defaults."""

    det: DetParams
    rec: RecParams
    cls: ClsParams | None
    """None when the textline-orientation classifier does not run for this request."""


def ocr_options(bundle: ModelBundle, pipeline: PipelineConfig, **overrides: Any) -> OcrOptions:
    """Request options: config defaults, then the request's overrides (None = default).

    Raises:
        ValidationFailed: an override is out of range (`check_overrides`).
    """
    check_overrides(overrides)
    det_cfg = pipeline.det
    model_det = bundle.det.det_params or DetParams()
    det = DetParams(
        limit_side_len=_pick(overrides.get("limit_side_len"), det_cfg.limit_side_len),
        limit_type=_pick(overrides.get("limit_type"), det_cfg.limit_type),
        max_side_limit=_pick(overrides.get("max_side_limit"), det_cfg.max_side_limit),
        thresh=_pick(overrides.get("thresh"), det_cfg.thresh),
        box_thresh=_pick(overrides.get("box_thresh"), det_cfg.box_thresh),
        unclip_ratio=_pick(overrides.get("unclip_ratio"), det_cfg.unclip_ratio),
        max_candidates=model_det.max_candidates,
    )
    model_rec = bundle.rec.rec_params or RecParams()
    rec = dataclasses.replace(
        model_rec,
        batch_size=pipeline.rec.batch_size,
        score_thresh=_pick(overrides.get("score_thresh"), pipeline.rec.score_thresh),
    )
    use_cls = _pick(overrides.get("use_textline_orientation"), pipeline.use_textline_orientation)
    cls = None
    if use_cls and bundle.cls is not None:
        cls = bundle.cls.cls_params
    return OcrOptions(det=det, rec=rec, cls=cls)


def check_overrides(overrides: Mapping[str, Any]) -> None:
    """Refuse numeric overrides outside `config.PIPELINE_RANGES`; None means "not given".

    Raises:
        ValidationFailed: naming the option, its range and the value.
    """
    for name in PIPELINE_RANGES:
        value = overrides.get(name)
        if value is not None and not in_range(name, value):
            raise ValidationFailed(f"{name} must be {range_text(name)}, got {value!r:.40}")


def _pick(value: Any, default: Any) -> Any:
    return default if value is None else value
