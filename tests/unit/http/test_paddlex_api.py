"""Unit tests for serving/http/paddlex_api.py: PaddleX's `/ocr` request fields, results and
envelopes."""

from __future__ import annotations

import base64
import json
import uuid
from typing import Any

import numpy as np
import pytest

from pipelines.types import ClsParams, DetParams, PageResult, RecParams, TextLine
from serving.errors import InvalidInput, ValidationFailed
from serving.http import paddlex_api
from serving.http.paddlex_api import (
    decode_base64_file,
    effective_overrides,
    envelope,
    infer_result,
    is_url,
    log_id_of,
    parse_request,
    pruned_result,
)
from serving.options import check_overrides
from serving.request_options import OcrOptions
from serving.service.ocr import PageOutput

PRUNED_KEYS = [
    "model_settings",
    "dt_polys",
    "text_det_params",
    "text_type",
    "textline_orientation_angles",
    "text_rec_score_thresh",
    "return_word_box",
    "rec_texts",
    "rec_scores",
    "rec_polys",
    "rec_boxes",
]


def _problems(err: ValidationFailed) -> list[dict[str, str]]:
    problems = json.loads(err.message)
    assert isinstance(problems, list)
    for problem in problems:
        assert set(problem) == {"type", "loc", "msg"}
    return problems


def _is_uuid4(value: str) -> bool:
    return uuid.UUID(value).version == 4 and str(uuid.UUID(value)) == value


# --- parse_request: valid bodies ------------------------------------------------------------


def test_minimal_body() -> None:
    req = parse_request({"file": "abc"})
    assert req.file == "abc"
    assert req.file_type is None
    assert req.overrides == {}
    assert req.visualize is None
    assert _is_uuid4(req.log_id)


@pytest.mark.parametrize(("file_type", "kind"), [(0, "pdf"), (1, "image"), (None, None)])
def test_file_type_mapping(file_type: int | None, kind: str | None) -> None:
    assert parse_request({"file": "x", "fileType": file_type}).file_type == kind


def test_overrides_mapped_to_option_names() -> None:
    body = {
        "file": "x",
        "logId": "req-1",
        "useDocOrientationClassify": False,
        "useDocUnwarping": False,
        "useTextlineOrientation": True,
        "textDetLimitSideLen": 960,
        "textDetLimitType": "max",
        "textDetThresh": 0.25,
        "textDetBoxThresh": 0.5,
        "textDetUnclipRatio": 2,
        "textRecScoreThresh": 0.4,
        "returnWordBox": False,
        "visualize": False,
    }
    req = parse_request(body)
    assert req.log_id == "req-1"
    assert req.visualize is False
    assert req.overrides == {
        "textline_orientation": True,
        "orientation": "off",  # useDocOrientationClassify: false
        "det_limit_side_len": 960,
        "det_limit_type": "max",
        "det_thresh": 0.25,
        "det_box_thresh": 0.5,
        "det_unclip_ratio": 2,
        "score_thresh": 0.4,
    }


def test_null_optional_fields_are_not_given() -> None:
    body = {"file": "x", "fileType": None, "textDetThresh": None, "visualize": None}
    req = parse_request(body)
    assert req.overrides == {}
    assert req.visualize is None
    assert req.file_type is None


def test_unknown_fields_are_ignored() -> None:
    # PaddleX's pydantic models ignore extra fields.
    assert parse_request({"file": "x", "somethingElse": [1, 2]}).overrides == {}


def test_int_accepted_for_float_field() -> None:
    assert parse_request({"file": "x", "textDetThresh": 1}).overrides == {"det_thresh": 1}


# --- parse_request: invalid bodies ----------------------------------------------------------


@pytest.mark.parametrize("body", [[], "file", 3, None])
def test_non_dict_body(body: Any) -> None:
    with pytest.raises(ValidationFailed) as info:
        parse_request(body)
    assert _problems(info.value) == [
        {"type": "model_attributes_type", "loc": "", "msg": "Input should be a valid dictionary"}
    ]
    assert info.value.http_status == 422


def test_missing_file() -> None:
    with pytest.raises(ValidationFailed) as info:
        parse_request({"fileType": 1})
    assert _problems(info.value) == [{"type": "missing", "loc": "file", "msg": "Field required"}]


@pytest.mark.parametrize("file", [1, ["a"], {"a": 1}, True])
def test_non_string_file(file: Any) -> None:
    with pytest.raises(ValidationFailed) as info:
        parse_request({"file": file})
    assert _problems(info.value) == [
        {"type": "string_type", "loc": "file", "msg": "Input should be a string"}
    ]


@pytest.mark.parametrize("file_type", [2, -1, "1", "0", True, False, [0]])
def test_bad_file_type(file_type: Any) -> None:
    with pytest.raises(ValidationFailed) as info:
        parse_request({"file": "x", "fileType": file_type})
    assert _problems(info.value) == [
        {"type": "literal_error", "loc": "fileType", "msg": "Input should be 0 or 1"}
    ]


@pytest.mark.parametrize(
    ("name", "value", "kind"),
    [
        ("textDetThresh", "x", "int/float"),
        ("textDetThresh", True, "int/float"),
        ("textDetBoxThresh", [0.5], "int/float"),
        ("textDetUnclipRatio", "1.5", "int/float"),
        ("textRecScoreThresh", False, "int/float"),
        ("textDetLimitSideLen", 960.5, "int"),
        ("textDetLimitSideLen", "960", "int"),
        ("textDetLimitSideLen", True, "int"),
        ("textDetLimitType", 1, "str"),
        ("useTextlineOrientation", 1, "bool"),
        ("useTextlineOrientation", "true", "bool"),
        ("useDocOrientationClassify", 0, "bool"),
        ("useDocUnwarping", "no", "bool"),
        ("returnWordBox", 1, "bool"),
        ("visualize", "yes", "bool"),
        ("logId", 17, "str"),
    ],
)
def test_wrong_typed_optional_field(name: str, value: Any, kind: str) -> None:
    with pytest.raises(ValidationFailed) as info:
        parse_request({"file": "x", name: value})
    assert _problems(info.value) == [
        {"type": f"{kind}_type", "loc": name, "msg": f"Input should be {kind}"}
    ]


def test_all_problems_reported_together() -> None:
    body = {"fileType": 5, "textDetThresh": "x", "useTextlineOrientation": 1}
    with pytest.raises(ValidationFailed) as info:
        parse_request(body)
    assert [p["loc"] for p in _problems(info.value)] == [
        "file",
        "fileType",
        "useTextlineOrientation",
        "textDetThresh",
    ]


def test_unwarping_refused() -> None:
    with pytest.raises(ValidationFailed) as info:
        parse_request({"file": "x", "useDocUnwarping": True})
    message = info.value.message
    assert "useDocUnwarping" in message
    assert "not served" in message


@pytest.mark.parametrize(("given", "expected"), [(True, "auto"), (False, "off"), (None, None)])
def test_doc_orientation_is_an_override(given: bool | None, expected: str | None) -> None:
    body: dict[str, object] = {"file": "x"}
    if given is not None:
        body["useDocOrientationClassify"] = given
    assert parse_request(body).overrides.get("orientation") == expected


def test_return_word_box_is_read() -> None:
    assert parse_request({"file": "x", "returnWordBox": True}).return_word_box is True
    assert parse_request({"file": "x", "returnWordBox": None}).return_word_box is False
    assert parse_request({"file": "x"}).return_word_box is False


@pytest.mark.parametrize("limit_type", ["long", "", "MIN"])
def test_bad_limit_type(limit_type: str) -> None:
    with pytest.raises(ValidationFailed, match="textDetLimitType must be min, max or resize_long"):
        parse_request({"file": "x", "textDetLimitType": limit_type})


@pytest.mark.parametrize("limit_type", ["min", "max", "resize_long"])
def test_good_limit_type(limit_type: str) -> None:
    req = parse_request({"file": "x", "textDetLimitType": limit_type})
    assert req.overrides == {"det_limit_type": limit_type}


# --- log_id_of ------------------------------------------------------------------------------


def test_log_id_echoed() -> None:
    assert log_id_of({"logId": "abc-123"}) == "abc-123"
    assert log_id_of({"logId": ""}) == ""


@pytest.mark.parametrize("body", [{}, {"logId": 5}, {"logId": None}, [], "x", None])
def test_log_id_generated(body: Any) -> None:
    first, second = log_id_of(body), log_id_of(body)
    assert _is_uuid4(first)
    assert first != second


LONGEST = "x" * paddlex_api.MAX_LOG_ID_CHARS


@pytest.mark.parametrize(
    ("log_id", "problem"),
    [(LONGEST + "x", "string_too_long"), ("a\nb", "string_pattern"), ("a\x1bb", "string_pattern")],
)
def test_an_unusable_log_id_is_422_and_not_echoed(log_id: str, problem: str) -> None:
    body = {"file": "aGk=", "fileType": 1, "logId": log_id}
    with pytest.raises(ValidationFailed) as caught:
        parse_request(body)
    (found,) = json.loads(caught.value.message)
    assert (found["loc"], found["type"]) == ("logId", problem)
    assert log_id_of(body, default="request-id") == "request-id"


def test_the_longest_log_id_and_any_printable_text_are_echoed() -> None:
    for log_id in (LONGEST, "请求-1 / ünï"):
        body = {"file": "aGk=", "fileType": 1, "logId": log_id}
        assert parse_request(body).log_id == log_id
        assert log_id_of(body, default="request-id") == log_id


# --- effective_overrides --------------------------------------------------------------------


@pytest.mark.parametrize(
    "key", ["det_limit_side_len", "det_thresh", "det_box_thresh", "det_unclip_ratio"]
)
@pytest.mark.parametrize("zero", [0, 0.0])
def test_falsy_means_default(key: str, zero: float) -> None:
    assert effective_overrides({key: zero}) == {key: None}


def test_score_thresh_zero_stays_zero() -> None:
    result = effective_overrides({"score_thresh": 0})
    assert result == {"score_thresh": 0}
    assert result["score_thresh"] is not None


def test_effective_overrides_keeps_other_values() -> None:
    overrides = {
        "det_limit_side_len": 736,
        "det_limit_type": "max",
        "det_thresh": 0.2,
        "det_box_thresh": 0.5,
        "det_unclip_ratio": 2.0,
        "score_thresh": 0.5,
        "textline_orientation": False,
    }
    assert effective_overrides(overrides) == overrides


def test_effective_overrides_does_not_mutate() -> None:
    overrides = {"det_thresh": 0}
    effective_overrides(overrides)
    assert overrides == {"det_thresh": 0}


# --- load_body and out-of-range options (found by test_properties_requests.py) -----------------


@pytest.mark.parametrize(
    "raw",
    [
        b'{"file": ' + b"7" * 4301 + b"}",  # json.loads: ValueError past 4300 digits
        b"[" * 100_000 + b"]" * 100_000,  # json.loads: RecursionError
        b'{"file": "\xff"}',
        b"",
    ],
)
def test_load_body_refuses_what_is_not_json(raw: bytes) -> None:
    with pytest.raises(ValidationFailed) as info:
        paddlex_api.load_body(raw)
    assert _problems(info.value)[0]["type"] == "json_invalid"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("textDetUnclipRatio", -2.0),  # cv2.error in the DB postprocess
        ("textDetUnclipRatio", 1e14),  # the worker runs out of memory
        ("textDetThresh", float("nan")),  # the response is not JSON
        ("textRecScoreThresh", float("inf")),
        ("textDetLimitSideLen", 10**400),  # OverflowError in the det resize
    ],
)
def test_options_the_pipeline_cannot_run_are_refused(field: str, value: Any) -> None:
    parsed = parse_request({"file": "eA==", "fileType": 1, field: value})
    with pytest.raises(ValidationFailed) as info:
        check_overrides(effective_overrides(parsed.overrides))
    assert info.value.http_status == 422


# --- decode_base64_file / is_url ------------------------------------------------------------


def test_decode_base64_round_trip() -> None:
    payload = bytes(range(256))
    assert decode_base64_file(base64.b64encode(payload).decode()) == payload


@pytest.mark.parametrize("data", ["not base64!", "abc", "YWJj$", "http://example.com/a.png"])
def test_decode_base64_invalid(data: str) -> None:
    with pytest.raises(InvalidInput, match="neither a URL nor valid base64") as info:
        decode_base64_file(data)
    assert info.value.http_status == 422


def test_decode_base64_non_ascii() -> None:
    with pytest.raises(InvalidInput):
        decode_base64_file("YWJj\u00e9")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("http://example.com/a.png", True),
        ("https://example.com", True),
        ("https://10.0.0.1:8080/x?y=1", True),
        ("ftp://example.com/a.png", False),
        ("http://", False),
        ("example.com/a.png", False),
        ("iVBORw0KGgo=", False),
        ("", False),
    ],
)
def test_is_url(value: str, expected: bool) -> None:
    assert is_url(value) is expected


# --- pruned_result --------------------------------------------------------------------------


def _quad(x0: int, y0: int, x1: int, y1: int) -> np.ndarray:
    return np.array([[x0, y0], [x1, y0], [x1, y1], [x0, y1]], dtype=np.int16)


def _options(*, cls: bool = False, **det: Any) -> OcrOptions:
    return OcrOptions(
        det=DetParams(**det),
        rec=RecParams(score_thresh=0.0),
        cls=ClsParams() if cls else None,
    )


def _page() -> PageResult:
    polys = [_quad(10, 20, 110, 50), _quad(12, 60, 90, 88), _quad(5, 100, 40, 120)]
    lines = [
        TextLine(text="Hello", score=np.float32(0.98), poly=polys[0], orientation=0),
        TextLine(text="World", score=0.875, poly=polys[1], orientation=1),
    ]
    return PageResult(width=200, height=150, dt_polys=polys, lines=lines, orientations=[0, 1, 0])


def test_pruned_result_key_order_and_values() -> None:
    page = _page()
    result = pruned_result(page, _options(cls=True), {}, use_cls=True)
    assert list(result) == PRUNED_KEYS
    assert result["model_settings"] == {
        "use_doc_preprocessor": False,
        "use_textline_orientation": True,
    }
    assert result["dt_polys"] == [
        [[10, 20], [110, 20], [110, 50], [10, 50]],
        [[12, 60], [90, 60], [90, 88], [12, 88]],
        [[5, 100], [40, 100], [40, 120], [5, 120]],
    ]
    assert result["text_type"] == "general"
    assert result["textline_orientation_angles"] == [0, 1, 0]
    assert result["text_rec_score_thresh"] == 0.0
    assert result["return_word_box"] is False
    assert result["rec_texts"] == ["Hello", "World"]
    assert result["rec_scores"] == pytest.approx([0.98, 0.875])
    assert result["rec_polys"] == result["dt_polys"][:2]
    assert result["rec_boxes"] == [[10, 20, 110, 50], [12, 60, 90, 88]]


def test_pruned_result_values_are_plain_python() -> None:
    result = pruned_result(_page(), _options(), {}, use_cls=False)
    assert result["model_settings"]["use_textline_orientation"] is False
    assert type(result["rec_scores"][0]) is float
    assert type(result["dt_polys"][0][0][0]) is int
    assert type(result["rec_polys"][0][0][0]) is int
    assert type(result["rec_boxes"][0][0]) is int
    assert all(type(a) is int for a in result["textline_orientation_angles"])
    assert json.loads(json.dumps(result)) == result


def test_text_det_params_from_options() -> None:
    options = _options(
        limit_side_len=960, limit_type="max", max_side_limit=3000, thresh=0.2, box_thresh=0.5
    )
    result = pruned_result(_page(), options, {}, use_cls=False)
    params = result["text_det_params"]
    assert list(params) == [
        "limit_side_len",
        "limit_type",
        "thresh",
        "max_side_limit",
        "box_thresh",
        "unclip_ratio",
    ]
    assert params == {
        "limit_side_len": 960,
        "limit_type": "max",
        "thresh": 0.2,
        "max_side_limit": 3000,
        "box_thresh": 0.5,
        "unclip_ratio": 1.5,
    }
    assert "max_candidates" not in params


def test_text_det_params_report_raw_request_values() -> None:
    # The request sent zeros: the pipeline ran with the defaults (options), but PaddleX reports
    # the request's values for these keys.
    reported = {
        "det_limit_side_len": 0,
        "det_thresh": 0,
        "det_box_thresh": 0.0,
        "det_unclip_ratio": 0,
    }
    options = _options(limit_side_len=64, thresh=0.3, box_thresh=0.6, unclip_ratio=1.5)
    params = pruned_result(_page(), options, reported, use_cls=False)["text_det_params"]
    assert params == {
        "limit_side_len": 0,
        "limit_type": "min",
        "thresh": 0,
        "max_side_limit": 4000,
        "box_thresh": 0.0,
        "unclip_ratio": 0,
    }


def test_text_det_params_ignore_non_quirk_reported_keys() -> None:
    reported = {"det_limit_type": "max", "textline_orientation": True}
    options = _options(limit_type="resize_long")
    params = pruned_result(_page(), options, reported, use_cls=False)["text_det_params"]
    assert params["limit_type"] == "resize_long"
    assert "use_textline_orientation" not in params


def test_text_rec_score_thresh_reported_and_default() -> None:
    options = OcrOptions(det=DetParams(), rec=RecParams(score_thresh=0.5), cls=None)
    page = _page()
    assert pruned_result(page, options, {}, use_cls=False)["text_rec_score_thresh"] == 0.5
    reported = {"score_thresh": 0}
    assert pruned_result(page, options, reported, use_cls=False)["text_rec_score_thresh"] == 0


def test_pruned_result_empty_page() -> None:
    page = PageResult(width=32, height=32)
    result = pruned_result(page, _options(), {}, use_cls=False)
    assert list(result) == [k for k in PRUNED_KEYS if k != "textline_orientation_angles"]
    assert result["dt_polys"] == []
    assert result["rec_texts"] == []
    assert result["rec_scores"] == []
    assert result["rec_polys"] == []
    assert result["rec_boxes"] == []
    assert json.loads(json.dumps(result)) == result


def test_pruned_result_detections_but_no_lines() -> None:
    # Every line fell below the score threshold: angles are still reported, rec_* are empty.
    poly = _quad(0, 0, 10, 10)
    page = PageResult(width=20, height=20, dt_polys=[poly], lines=[], orientations=[-1])
    result = pruned_result(page, _options(), {}, use_cls=False)
    assert list(result) == PRUNED_KEYS
    assert result["textline_orientation_angles"] == [-1]
    assert result["dt_polys"] == [[[0, 0], [10, 0], [10, 10], [0, 10]]]
    assert result["rec_boxes"] == []
    assert result["rec_polys"] == []


# --- infer_result / envelope ----------------------------------------------------------------


def test_infer_result_image() -> None:
    page = _page()
    images = {"ocrImage": "b64-ocr", "inputImage": "b64-input", "other": "x"}
    result = infer_result([PageOutput(page, images)], "image", _options(cls=True), {})
    assert list(result) == ["ocrResults", "dataInfo"]
    assert result["dataInfo"] == {"width": 200, "height": 150, "type": "image"}
    (entry,) = result["ocrResults"]
    assert list(entry) == ["prunedResult", "ocrImage", "inputImage"]
    assert entry["ocrImage"] == "b64-ocr"
    assert entry["inputImage"] == "b64-input"
    assert entry["prunedResult"] == pruned_result(page, _options(cls=True), {}, use_cls=True)
    assert entry["prunedResult"]["model_settings"]["use_textline_orientation"] is True


def test_infer_result_pdf_without_images() -> None:
    pages = [PageOutput(_page()), PageOutput(PageResult(width=300, height=400))]
    result = infer_result(pages, "pdf", _options(), {"det_thresh": 0})
    assert result["dataInfo"] == {
        "numPages": 2,
        "pages": [{"width": 200, "height": 150}, {"width": 300, "height": 400}],
        "type": "pdf",
    }
    assert [list(e) for e in result["ocrResults"]] == [["prunedResult"], ["prunedResult"]]
    first, second = (e["prunedResult"] for e in result["ocrResults"])
    assert first["rec_texts"] == ["Hello", "World"]
    assert second["rec_texts"] == []
    assert first["text_det_params"]["thresh"] == 0
    assert first["model_settings"]["use_textline_orientation"] is False
    assert json.loads(json.dumps(result)) == result


def test_envelope_success() -> None:
    result = {"ocrResults": [], "dataInfo": {}}
    assert envelope("id-1", result) == {
        "logId": "id-1",
        "errorCode": 0,
        "errorMsg": "Success",
        "result": result,
    }
    assert list(envelope("id-1", result)) == ["logId", "errorCode", "errorMsg", "result"]


def test_envelope_error() -> None:
    body = envelope("id-2", status=422, message="Invalid input file")
    assert body == {"logId": "id-2", "errorCode": 422, "errorMsg": "Invalid input file"}
    assert "result" not in body


def test_module_constants_cover_quirk_keys() -> None:
    # Guard against the quirk list drifting from the option names parse_request produces.
    options = {opt for _, opt in paddlex_api._OPTIONAL_FIELDS.values() if opt is not None}
    assert set(paddlex_api._FALSY_MEANS_DEFAULT) <= options
    assert "score_thresh" not in paddlex_api._FALSY_MEANS_DEFAULT
