"""Unit tests for serving/http/exceptions.py: each API's error format, rendered once."""

from __future__ import annotations

import json
import logging

import pytest

from serving.config import ServerConfig
from serving.errors import NotReady, Overloaded, QuotaExceeded, ValidationFailed
from serving.http.exceptions import native_error, paddlex_error


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
        assert response.headers["retry-after"] == "7"
    assert json.loads(paddlex.body) == {
        "logId": "log-1",
        "errorCode": status,
        "errorMsg": Overloaded.default_message,
    }


def test_every_503_carries_retry_after() -> None:
    response = native_error(NotReady(), ServerConfig(retry_after_s=3))
    assert (response.status_code, response.headers["retry-after"]) == (503, "3")


def test_a_keys_429_carries_its_own_retry_after_or_the_servers() -> None:
    server = ServerConfig(overload_status=503, retry_after_s=3)
    response = native_error(QuotaExceeded("over", retry_after_s=41.2), server)
    assert response.status_code == 429
    assert response.headers["retry-after"] == "42"
    assert json.loads(response.body)["error"]["code"] == "quota_exceeded"
    pages = paddlex_error(QuotaExceeded("pages"), "log-1", server)
    assert pages.status_code == 429
    assert pages.headers["retry-after"] == "3"
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
