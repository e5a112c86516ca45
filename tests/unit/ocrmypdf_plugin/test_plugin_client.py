"""The plugin's HTTP client on httpx's mock transport: what it retries, how long it waits, and
what it tells the user when it gives up (the real server and `ocrmypdf`: tests/e2e)."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest

from serving.ocrmypdf_plugin.client import (
    MAX_WAIT_S,
    ClientSettings,
    OcrServerError,
    ServerClient,
    retry_wait_s,
)

pytestmark = pytest.mark.unit

PAGE = {"pages": [{"page": 0, "width": 10, "height": 10, "lines": []}]}


def _client(
    handler: Callable[[httpx.Request], httpx.Response], **settings: object
) -> tuple[ServerClient, list[float]]:
    waits: list[float] = []
    client = ServerClient(
        ClientSettings(url="http://ocr.test", **settings),  # type: ignore[arg-type]
        sleep=waits.append,
    )
    client._http = httpx.Client(  # the same client, on a transport that answers in process
        base_url="http://ocr.test",
        headers=client._http.headers,
        transport=httpx.MockTransport(handler),
    )
    return client, waits


def _busy(status: int, retry_after: str | None) -> httpx.Response:
    headers = {"retry-after": retry_after} if retry_after is not None else {}
    body = {"error": {"code": "overloaded", "message": "busy", "request_id": "r"}}
    return httpx.Response(status, headers=headers, json=body)


def test_503_then_200_waits_retry_after_and_sends_the_page_again() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return _busy(503, "2") if len(seen) == 1 else httpx.Response(200, json=PAGE)

    client, waits = _client(handler, api_key="k1")
    page = client.ocr(b"png", {"words": "true", "lang": "fr"})
    assert page == PAGE["pages"][0]
    assert waits == [2.0]
    assert [r.content for r in seen] == [b"png", b"png"]
    assert seen[-1].url.params["lang"] == "fr"
    assert seen[-1].headers["x-api-key"] == "k1"
    assert seen[-1].headers["x-request-timeout"] == "300"


def test_429_without_retry_after_backs_off_doubling_then_reports_the_status() -> None:
    client, waits = _client(lambda _: _busy(429, None), retries=3)
    with pytest.raises(OcrServerError) as caught:
        client.ocr(b"png", {})
    assert waits == [0.5, 1.0, 2.0]
    assert caught.value.status == 429
    assert "answered 429" in str(caught.value)
    assert "overloaded: busy" in str(caught.value)


def test_other_errors_are_not_retried() -> None:
    calls: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        body = {"error": {"code": "validation_failed", "message": "lang xx", "request_id": "r"}}
        return httpx.Response(422, json=body)

    client, waits = _client(handler)
    with pytest.raises(OcrServerError, match=r"422.*validation_failed: lang xx"):
        client.ocr(b"png", {"lang": "xx"})
    assert (len(calls), waits) == (1, [])


def test_a_server_not_reached_names_its_url() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("Connection refused", request=request)

    client, _ = _client(handler)
    with pytest.raises(OcrServerError, match=r"cannot reach the OCR server at http://ocr\.test"):
        client.languages()


def test_retry_after_is_capped_and_a_bad_one_backs_off() -> None:
    assert retry_wait_s(_busy(503, "3600"), 1) == MAX_WAIT_S
    assert retry_wait_s(_busy(503, "soon"), 3) == 2.0
    assert retry_wait_s(_busy(503, "-5"), 1) == 0.0


def test_languages_are_the_servers() -> None:
    body = {"default": "v5", "models": [], "languages": ["ch", "en", "fr"], "unavailable": []}
    client, _ = _client(lambda _: httpx.Response(200, json=body))
    assert client.languages() == {"ch", "en", "fr"}
