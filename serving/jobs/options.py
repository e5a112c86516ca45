"""Batch OCR options (named as `/v1/ocr`'s query parameters) and the per-page result record."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pipelines.types import LIMIT_TYPES, PageResult
from serving.config import choices_text
from serving.errors import ValidationFailed
from serving.request_options import check_overrides

OPTIONS: dict[str, tuple[str, type]] = {
    "det_limit_side_len": ("limit_side_len", int),
    "det_limit_type": ("limit_type", str),
    "det_thresh": ("thresh", float),
    "det_box_thresh": ("box_thresh", float),
    "det_unclip_ratio": ("unclip_ratio", float),
    "score_thresh": ("score_thresh", float),
    "textline_orientation": ("use_textline_orientation", bool),
}
"""Option name -> (`request_options.ocr_options` override, type)."""


def parse_options(raw: Mapping[str, Any]) -> dict[str, Any]:
    """Checked options; strings are converted, so query parameters and JSON values both work.

    Raises:
        ValidationFailed: an unknown option, a value of the wrong type or out of range.
    """
    options: dict[str, Any] = {}
    for name, value in raw.items():
        if name not in OPTIONS:
            known = ", ".join(OPTIONS)
            raise ValidationFailed(f"Unknown option {name!r}; the options are {known}")
        options[name] = _coerce(name, value, OPTIONS[name][1])
    if options.get("det_limit_type", LIMIT_TYPES[0]) not in LIMIT_TYPES:
        raise ValidationFailed(f"det_limit_type must be {choices_text(LIMIT_TYPES)}")
    check_overrides(overrides(options))
    return options


def overrides(options: Mapping[str, Any]) -> dict[str, Any]:
    """Options as `request_options.ocr_options` overrides."""
    return {OPTIONS[name][0]: value for name, value in options.items() if name in OPTIONS}


def page_record(file: str, page: int, result: PageResult, **extra: Any) -> dict[str, Any]:
    """One page's result: a line of the jobs API's NDJSON and of `ocr-batch`'s JSONL."""
    return {
        "file": file,
        **extra,
        "page": page,
        "width": result.width,
        "height": result.height,
        "lines": [
            {"text": line.text, "score": float(line.score), "box": line.poly.tolist()}
            for line in result.lines
        ],
    }


def _coerce(name: str, value: Any, kind: type) -> Any:
    if isinstance(value, str) and kind is not str:
        text = value.strip().lower()
        if kind is bool and text in ("1", "true", "0", "false"):
            return text in ("1", "true")
        if kind is not bool:
            try:
                return kind(text)
            except ValueError:
                pass
    elif kind is bool or kind is str:
        if isinstance(value, kind):
            return value
    elif (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and (kind is float or isinstance(value, int))
    ):
        try:
            return kind(value)
        except OverflowError:  # an int past float range
            pass
    raise ValidationFailed(f"Option {name}: expected {kind.__name__}, got {value!r}")
