"""PaddleX basic serving's OCR API: request fields, `prunedResult`, envelopes (drop-in `/ocr`)."""

from __future__ import annotations

import base64
import binascii
import json
import uuid
from dataclasses import dataclass
from typing import Any

from pipelines.crop import boxes_from_polys
from pipelines.types import LIMIT_TYPES, PageResult
from serving.decode.readers import FileKind
from serving.errors import InvalidInput, ValidationFailed
from serving.options import choices_text
from serving.outputs.document import make_line
from serving.request_options import OcrOptions
from serving.service.ocr import PageOutput

# Request field -> (accepted JSON types, the OCR option it sets: `serving.options.OPTIONS`).
_OPTIONAL_FIELDS: dict[str, tuple[tuple[type, ...], str | None]] = {
    "useDocOrientationClassify": ((bool,), None),
    "useDocUnwarping": ((bool,), None),
    "useTextlineOrientation": ((bool,), "textline_orientation"),
    "textDetLimitSideLen": ((int,), "det_limit_side_len"),
    "textDetLimitType": ((str,), "det_limit_type"),
    "textDetThresh": ((int, float), "det_thresh"),
    "textDetBoxThresh": ((int, float), "det_box_thresh"),
    "textDetUnclipRatio": ((int, float), "det_unclip_ratio"),
    "textRecScoreThresh": ((int, float), "score_thresh"),
    "returnWordBox": ((bool,), None),
    "visualize": ((bool,), None),
    "logId": ((str,), None),
    # Not PaddleX's: its OCR app serves one model set and ignores fields it does not know, as it
    # would these. Here they pick the model set as `/v1/ocr`'s do (`serving.model_sets`).
    "lang": ((str,), "lang"),
    "model": ((str,), "model"),
}
NO_CLASSIFIER = (
    "useTextlineOrientation is true but no textline-orientation model is configured (models.cls)"
)
"""The answer to `useTextlineOrientation: true` without a classifier (PaddleX answers 500)."""
# PaddleX reads these as `value or default`: a 0 in the request runs with the default but is
# still reported in `text_det_params` (option -> its key there). Reproduced so that results match
# PaddleX's.
_FALSY_MEANS_DEFAULT = {
    "det_limit_side_len": "limit_side_len",
    "det_thresh": "thresh",
    "det_box_thresh": "box_thresh",
    "det_unclip_ratio": "unclip_ratio",
}


@dataclass(frozen=True, slots=True)
class OcrRequest:
    """A parsed `/ocr` request."""

    log_id: str
    file: str
    """Base64 data or a URL."""
    file_type: FileKind | None
    overrides: dict[str, Any]
    """The OCR options as the request gave them (`serving.options.OPTIONS`; None = not given)."""
    visualize: bool | None
    return_word_box: bool = False
    """`returnWordBox`: each line's words and their boxes (`text_word`, `text_word_boxes`)."""


MAX_LOG_ID_CHARS = 128
"""A `logId` is echoed in the answer and written to the log: longer ones get 422 (PaddleX takes
any string; a 100 MB one was echoed whole)."""


def usable_log_id(value: Any) -> bool:
    """Whether `value` is a `logId` the server echoes: a string of at most `MAX_LOG_ID_CHARS`
    printable characters (no line breaks or other control characters to forge log lines with)."""
    return isinstance(value, str) and len(value) <= MAX_LOG_ID_CHARS and value.isprintable()


def log_id_of(body: Any, default: str | None = None) -> str:
    """The request's `logId` when it has a usable one, else `default` (the request id), else a
    new id (as PaddleX)."""
    if isinstance(body, dict) and usable_log_id(body.get("logId")):
        return str(body["logId"])
    return default or str(uuid.uuid4())


FILE_TYPES = (
    "multipart/form-data",
    "application/pdf",
    "application/octet-stream",
    "application/zip",
)
"""Content types (besides image/*) of a file sent as it is, which `/ocr` never reads."""


def check_content_type(content_type: str) -> None:
    """Refuse a file sent to `/ocr` as multipart or raw bytes, saying where it goes: `/ocr`
    reads PaddleX's JSON body (a multipart upload got a bare JSON decode error).

    Raises:
        ValidationFailed: PaddleX's `json_invalid` problem list, naming `/v1/ocr`.
    """
    media = content_type.split(";")[0].strip().lower()
    if media in FILE_TYPES or media.startswith("image/"):
        message = (
            f"/ocr takes PaddleX's JSON body (file as base64, fileType 0 for a PDF, 1 for an "
            f"image), not {media}: POST /v1/ocr takes a multipart `file` or the raw file"
        )
        problem = [{"type": "json_invalid", "loc": "body", "msg": message}]
        raise ValidationFailed(json.dumps(problem))


def load_body(raw: bytes) -> Any:
    """The JSON value of an `/ocr` request body.

    Raises:
        ValidationFailed: not JSON, with PaddleX's `json_invalid` problem list. That includes a
            number of more than 4300 digits and nesting past the recursion limit, which
            `json.loads` raises as a plain ValueError and a RecursionError.
    """
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as err:  # JSONDecodeError, UnicodeDecodeError: ValueErrors
        problem = [{"type": "json_invalid", "loc": "body", "msg": f"JSON decode error: {err}"}]
        raise ValidationFailed(json.dumps(problem)) from err


def parse_request(body: Any) -> OcrRequest:
    """Validate an `/ocr` JSON body.

    Raises:
        ValidationFailed: with PaddleX's `[{type, loc, msg}]` list as the message.
    """
    if not isinstance(body, dict):
        _invalid("model_attributes_type", "", "Input should be a valid dictionary")
    problems: list[dict[str, str]] = []
    file = body.get("file")
    if file is None:
        problems.append({"type": "missing", "loc": "file", "msg": "Field required"})
    elif not isinstance(file, str):
        problems.append({"type": "string_type", "loc": "file", "msg": "Input should be a string"})
    file_type = body.get("fileType")
    if file_type is not None and (isinstance(file_type, bool) or file_type not in (0, 1)):
        problems.append(
            {"type": "literal_error", "loc": "fileType", "msg": "Input should be 0 or 1"}
        )
    overrides: dict[str, Any] = {}
    for name, (types_, option) in _OPTIONAL_FIELDS.items():
        value = body.get(name)
        if value is None:
            continue
        if (isinstance(value, bool) and bool not in types_) or not isinstance(value, types_):
            kind = "/".join(t.__name__ for t in types_)
            problems.append({"type": f"{kind}_type", "loc": name, "msg": f"Input should be {kind}"})
            continue
        if option is not None:
            overrides[option] = value
    log_id = body.get("logId")
    if isinstance(log_id, str) and not usable_log_id(log_id):
        problems.append(
            {
                "type": "string_too_long" if len(log_id) > MAX_LOG_ID_CHARS else "string_pattern",
                "loc": "logId",
                "msg": f"Input should be at most {MAX_LOG_ID_CHARS} printable characters",
            }
        )
    if problems:
        raise ValidationFailed(json.dumps(problems))
    if body.get("useDocUnwarping"):
        raise ValidationFailed(
            "Document unwarping is not served here (no packaged unwarping model): "
            "send useDocUnwarping as false or leave it out"
        )
    if body.get("useDocOrientationClassify") is not None:
        overrides["orientation"] = "auto" if body["useDocOrientationClassify"] else "off"
    if overrides.get("det_limit_type") not in (None, *LIMIT_TYPES):
        raise ValidationFailed(f"textDetLimitType must be {choices_text(LIMIT_TYPES)}")
    file_kind: FileKind | None = None
    if file_type is not None:
        file_kind = "pdf" if file_type == 0 else "image"
    return OcrRequest(
        log_id=log_id_of(body),
        file=str(file),
        file_type=file_kind,
        overrides=overrides,
        visualize=body.get("visualize"),
        return_word_box=bool(body.get("returnWordBox")),
    )


def _invalid(kind: str, loc: str, msg: str) -> None:
    raise ValidationFailed(json.dumps([{"type": kind, "loc": loc, "msg": msg}]))


def effective_overrides(overrides: dict[str, Any]) -> dict[str, Any]:
    """The overrides the pipeline runs with (PaddleX's `value or default` quirk applied)."""
    return {
        key: (None if key in _FALSY_MEANS_DEFAULT and not value else value)
        for key, value in overrides.items()
    }


def decode_base64_file(data: str) -> bytes:
    """Decode the `file` field.

    Raises:
        InvalidInput: not valid base64 (422, as PaddleX).
    """
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as err:
        raise InvalidInput("Invalid input file: `file` is neither a URL nor valid base64") from err


def is_url(value: str) -> bool:
    """PaddleX's test: an http(s) scheme and a host."""
    from urllib.parse import urlparse

    parsed = urlparse(value)
    return parsed.scheme in ("http", "https") and bool(parsed.netloc)


def pruned_result(
    page: PageResult,
    options: OcrOptions,
    reported: dict[str, Any],
    use_cls: bool,
    return_word_box: bool = False,
) -> dict[str, Any]:
    """PaddleOCR's `res` for one page, minus `input_path` and `page_index` (PaddleX's prune).

    With `return_word_box`, PaddleX's `text_word` (each line's words) and `text_word_boxes`
    (each word's [x0, y0, x1, y1]), from `pipelines.words`: its words keep their punctuation and
    a run of CJK characters is one word, where PaddleX drops punctuation and boxes each CJK
    character on its own."""
    det = options.det
    params = {
        "limit_side_len": det.limit_side_len,
        "limit_type": det.limit_type,
        "thresh": det.thresh,
        "max_side_limit": det.max_side_limit,
        "box_thresh": det.box_thresh,
        "unclip_ratio": det.unclip_ratio,
    }
    for name, key in _FALSY_MEANS_DEFAULT.items():
        if name in reported:
            params[key] = reported[name]
    rec_polys = [line.poly for line in page.lines]
    use_doc = page.page_orientation is not None
    result: dict[str, Any] = {
        "model_settings": {"use_doc_preprocessor": use_doc, "use_textline_orientation": use_cls},
    }
    if page.page_orientation is not None:
        # PaddleX's: the angle the page was turned by to be read. Unlike PaddleX, whose boxes are
        # those of the turned page, ours are in the page as sent (docs/paddlex-compat.md).
        result["doc_preprocessor_res"] = {
            "model_settings": {"use_doc_orientation_classify": True, "use_doc_unwarping": False},
            "angle": page.page_orientation.applied,
        }
    result |= {
        "dt_polys": [poly.tolist() for poly in page.dt_polys],
        "text_det_params": params,
        "text_type": "general",
    }
    if page.dt_polys:
        result["textline_orientation_angles"] = list(page.orientations)
    result["text_rec_score_thresh"] = reported.get("score_thresh", options.rec.score_thresh)
    result["return_word_box"] = return_word_box
    result["rec_texts"] = [line.text for line in page.lines]
    result["rec_scores"] = [float(line.score) for line in page.lines]
    result["rec_polys"] = [poly.tolist() for poly in rec_polys]
    result["rec_boxes"] = boxes_from_polys(rec_polys).tolist() if rec_polys else []
    if return_word_box:
        words = [
            make_line(line.text, line.score, line.poly, line.words).words for line in page.lines
        ]
        result["text_word_boxes"] = [[list(w.box) for w in line] for line in words]
        result["text_word"] = [[w.text for w in line] for line in words]
    return result


def infer_result(
    pages: list[PageOutput],
    kind: FileKind,
    options: OcrOptions,
    reported: dict[str, Any],
    *,
    frames_type: str = "tiff",
    return_word_box: bool = False,
) -> dict[str, Any]:
    """The `result` object of a successful `/ocr` response.

    An image of several frames (multi-frame TIFF, animated GIF) is described as a document of
    several pages, `type` being `frames_type`.
    """
    use_cls = options.cls is not None
    ocr_results = []
    for page in pages:
        entry: dict[str, Any] = {
            "prunedResult": pruned_result(page.result, options, reported, use_cls, return_word_box)
        }
        if page.images:
            entry["ocrImage"] = page.images["ocrImage"]
            entry["inputImage"] = page.images["inputImage"]
        ocr_results.append(entry)
    if kind == "pdf" or len(pages) > 1:
        data_info: dict[str, Any] = {
            "numPages": len(pages),
            "pages": [{"width": p.result.width, "height": p.result.height} for p in pages],
            "type": "pdf" if kind == "pdf" else frames_type,
        }
    else:
        first = pages[0].result
        data_info = {"width": first.width, "height": first.height, "type": "image"}
    return {"ocrResults": ocr_results, "dataInfo": data_info}


def envelope(
    log_id: str, result: dict[str, Any] | None = None, *, status: int = 0, message: str = "Success"
) -> dict[str, Any]:
    """PaddleX's response envelope; errors carry the HTTP status as `errorCode`."""
    body: dict[str, Any] = {"logId": log_id, "errorCode": status, "errorMsg": message}
    if result is not None:
        body["result"] = result
    return body
