"""A batch's OCR options (named as `/v1/ocr`'s query parameters, checked strictly) and the
per-page result record."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pipelines.types import PageResult, TextLine
from serving.errors import ValidationFailed
from serving.options import OPTIONS, check_choice, check_overrides
from serving.outputs.document import orientation_json


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
        options[name] = _coerce(name, value, OPTIONS[name].kind)
    for name, option in OPTIONS.items():
        if option.choices and name in options:
            check_choice(name, options[name])
    check_overrides(options)
    return options


def options_from_json(text: str) -> dict[str, Any]:
    """The options a job's `options` form field holds, as a JSON object (not yet checked).

    Raises:
        ValidationFailed: not JSON, or not an object.
    """
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as err:  # also 4300+ digit numbers and deep nesting
        raise ValidationFailed(f"The `options` field is not JSON: {err}") from err
    if not isinstance(value, dict):
        raise ValidationFailed("The `options` field must be a JSON object")
    return value


def page_record(file: str, page: int, result: PageResult, **extra: Any) -> dict[str, Any]:
    """One page's result: a line of the jobs API's NDJSON and of `ocr-batch`'s JSONL; each line
    with its `words` (text, box x0 y0 x1 y1, score) when the OCR kept them, which the document
    formats (hOCR, ALTO, PDF: `serving.jobs.document_files`) place word by word."""
    return {
        "file": file,
        **extra,
        "page": page,
        "width": result.width,
        "height": result.height,
        "skew": result.skew,
        "lines": [_line(line) for line in result.lines],
        **orientation_json(result),
    }


def _line(line: TextLine) -> dict[str, Any]:
    body: dict[str, Any] = {
        "text": line.text,
        "score": float(line.score),
        "box": line.poly.tolist(),
    }
    words = getattr(line, "words", None)
    if words:
        body["words"] = [
            {"text": w.text, "box": [int(v) for v in w.box], "score": float(w.score)} for w in words
        ]
    return body


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
