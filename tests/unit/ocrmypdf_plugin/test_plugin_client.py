"""The plugin's HTTP client on httpx's mock transport: what it retries, how long it waits, and
what it tells the user when it gives up (the real server and `ocrmypdf`: tests/e2e)."""

from __future__ import annotations

import contextlib
import http.server
import json
import threading
from collections.abc import Callable, Iterator
from typing import ClassVar

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


class _Hostile(http.server.BaseHTTPRequestHandler):
    """A real HTTP server that answers as a compromised or broken one might (issue 49)."""

    answers: ClassVar[list[tuple[int, dict[str, str], bytes | int]]] = []

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["content-length"]))
        status, headers, body = self.answers.pop(0)
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        if isinstance(body, int):  # that many bytes, sent as they are made
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            chunk = b"x" * 65536
            with contextlib.suppress(OSError):
                for _ in range(body // len(chunk)):
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.wfile.write(b"0\r\n\r\n")
            return
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def hostile() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hostile)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_retry_after_of_nan_waits_the_backoff_not_a_value_error(hostile: str) -> None:
    """`float("nan")` passed the parse, and `time.sleep(nan)` raised ValueError."""
    busy = json.dumps({"error": {"code": "overloaded", "message": "busy"}}).encode()
    _Hostile.answers = [
        (503, {"retry-after": "nan"}, busy),
        (503, {"retry-after": "inf"}, busy),
        (200, {"content-type": "application/json"}, json.dumps(PAGE).encode()),
    ]
    waits: list[float] = []
    client = ServerClient(ClientSettings(url=hostile), sleep=waits.append)
    try:
        assert client.ocr(b"png", {}) == PAGE["pages"][0]
    finally:
        client.close()
    assert waits == [0.5, 1.0]  # the backoff, not nan (nor 60 s for inf)


def test_an_answer_past_the_cap_is_refused_unread(hostile: str) -> None:
    """Answers were read whole into OCRmyPDF's memory, however large."""
    _Hostile.answers = [
        (200, {"content-type": "application/json"}, 64 * 1024 * 1024),  # chunked: no length
        (200, {"content-type": "application/json"}, b"x" * 2_000_000),
    ]
    client = ServerClient(ClientSettings(url=hostile, max_answer_bytes=1_000_000))
    try:
        with pytest.raises(OcrServerError, match="more than 1000000 bytes"):
            client.ocr(b"png", {})
        with pytest.raises(OcrServerError, match="ocr-max-answer-bytes"):
            client.ocr(b"png", {})  # declared in Content-Length: refused at once
    finally:
        client.close()
