"""`/v1` endpoints refuse query parameters and form fields they do not read (issue 36, item 4):
`/v1/ocr?foo=bar` used to answer 200 as if it had not been sent."""

from __future__ import annotations

import types

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.testclient import TestClient

from serving.config import AppConfig
from serving.errors import ValidationFailed
from serving.http.exceptions import native_errors
from serving.http.params import JOB_QUERY, OCR_QUERY, check_names, known_query


async def _ok(request: Request) -> Response:
    return JSONResponse({"ok": True})


def _client() -> TestClient:
    route = Route("/v1/ocr", native_errors(known_query(OCR_QUERY, _ok)), methods=["POST"])
    app = Starlette(routes=[route])
    app.state.services = types.SimpleNamespace(config=AppConfig())  # what errors are rendered with
    return TestClient(app)


def test_known_parameters_pass() -> None:
    response = _client().post("/v1/ocr?det_thresh=0.3&format=json&words=true&layout=true")
    assert response.status_code == 200


def test_unknown_parameter_is_named() -> None:
    response = _client().post("/v1/ocr?foo=bar&det_thresh=0.3")
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["code"] == "validation_failed"
    assert "'foo'" in error["message"]
    assert "det_thresh" in error["message"]  # and what the endpoint takes


def test_every_unknown_parameter_is_named_once() -> None:
    with pytest.raises(ValidationFailed, match=r"parameters 'a', 'b';"):
        check_names(["a", "det_thresh", "b", "a"], OCR_QUERY, "query parameter")


def test_endpoint_without_parameters() -> None:
    with pytest.raises(ValidationFailed, match="takes no query parameters"):
        check_names(["x"], (), "query parameter")


def test_jobs_take_the_ocr_options_only() -> None:
    assert "format" not in JOB_QUERY
    check_names(["det_thresh", "textline_orientation"], JOB_QUERY, "query parameter")
