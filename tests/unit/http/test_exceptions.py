"""Unit tests for serving/http/exceptions.py: each API's error format, rendered once."""

from __future__ import annotations

import json
import logging
import types
from typing import cast

import pytest
from starlette.testclient import TestClient

from serving.app import build_app
from serving.config import AppConfig, ServerConfig
from serving.errors import NotReady, Overloaded, QuotaExceeded, ValidationFailed
from serving.http.exceptions import native_error, paddlex_error
from serving.metrics import Metrics
from serving.service.runtime import Runtime


def test_native_error_carries_code_message_and_request_id() -> None:
    response = native_error(ValidationFailed("bad"), ServerConfig())
    assert response.status_code == 422
    body = json.loads(response.body)
    assert body["error"]["code"] == "validation_failed"
    assert body["error"]["message"] == "bad"
    assert body["error"]["request_id"]
    assert "retry-after" not in response.headers


@pytest.mark.parametrize("status", [429, 503])
def test_shed_work_answers_the_configured_status_with_retry_after(status: int) -> None:
    server = ServerConfig(overload_status=status, retry_after_s=7)
    native = native_error(Overloaded(), server)
    paddlex = paddlex_error(Overloaded(), "log-1", server)
    for response in (native, paddlex):
        assert response.status_code == status
        assert 7 <= int(response.headers["retry-after"]) <= 14  # spread up to twice the setting
    assert json.loads(paddlex.body) == {
        "logId": "log-1",
        "errorCode": status,
        "errorMsg": Overloaded.default_message,
    }


def test_every_503_carries_retry_after() -> None:
    response = native_error(NotReady(), ServerConfig(retry_after_s=3))
    assert response.status_code == 503
    assert 3 <= int(response.headers["retry-after"]) <= 6


def test_a_keys_429_carries_its_own_retry_after_or_the_servers() -> None:
    server = ServerConfig(overload_status=503, retry_after_s=3)
    response = native_error(QuotaExceeded("over", retry_after_s=41.2), server)
    assert response.status_code == 429
    assert response.headers["retry-after"] == "42"  # the key's bucket's own time, exact
    assert json.loads(response.body)["error"]["code"] == "quota_exceeded"
    pages = paddlex_error(QuotaExceeded("pages"), "log-1", server)
    assert pages.status_code == 429
    assert 3 <= int(pages.headers["retry-after"]) <= 6
    assert json.loads(pages.body)["errorCode"] == 429


def test_other_exceptions_are_logged_and_answered_as_a_bare_500(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.ERROR):
        response = paddlex_error(KeyError("secret detail"), "log-2", ServerConfig())
    assert response.status_code == 500
    assert json.loads(response.body)["errorMsg"] == "Internal server error"
    assert b"secret" not in response.body
    assert any(r.exc_info for r in caplog.records)


@pytest.fixture(scope="module")
def app_client() -> TestClient:
    """The real app's routes and middleware; no request here reaches the runtime."""
    runtime = types.SimpleNamespace(
        config=AppConfig(), metrics=Metrics(), endpoint_services=lambda: None
    )
    return TestClient(build_app(cast(Runtime, runtime), environ={}), base_url="http://localhost")


def test_an_unknown_route_is_a_json_404_naming_the_nearest(app_client: TestClient) -> None:
    response = app_client.post("/v1/orc")
    assert response.status_code == 404
    assert response.headers["content-type"] == "application/json"
    error = response.json()["error"]
    assert error["code"] == "not_found"
    assert error["message"].startswith("No route POST /v1/orc; did you mean /v1/ocr?")
    assert "GET /openapi.json" in error["message"]
    assert error["request_id"] == response.headers["x-request-id"]
    far = app_client.get("/nothing/here").json()["error"]["message"]
    assert far.startswith("No route GET /nothing/here. Every route: GET /openapi.json")


def test_a_wrong_method_is_a_json_405_naming_the_methods(app_client: TestClient) -> None:
    response = app_client.get("/v1/ocr")
    assert response.status_code == 405
    assert response.headers["allow"] == "POST"
    error = response.json()["error"]
    assert error["code"] == "method_not_allowed"
    assert error["message"].startswith("/v1/ocr does not take GET: it takes POST (the document")
    assert "GET /" in error["message"]


def test_paddlex_route_refusals_come_in_its_envelope(app_client: TestClient) -> None:
    response = app_client.get("/ocr")
    assert response.status_code == 405
    body = response.json()
    assert body["errorCode"] == 405
    assert "POST /v1/ocr" in body["errorMsg"]
    assert body["logId"] == response.headers["x-request-id"]
