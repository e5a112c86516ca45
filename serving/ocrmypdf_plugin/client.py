"""The OCR server as OCRmyPDF's plugin calls it: `POST /v1/ocr` for a page image and `GET
/v1/models` for the languages, over one HTTP connection pool that OCRmyPDF's page threads share
(their pages reach the server at once, and its queues batch them). 429 and 503 are retried,
waiting the server's `Retry-After` (else a doubling backoff), up to `retries` times.

The server is trusted no more than the network it is reached over (issue 49, item 10): a
`Retry-After` that is no finite number (`nan` raised `ValueError` in `time.sleep`) waits the
backoff instead, and an answer is read only up to `max_answer_bytes` (it was read whole into
OCRmyPDF's memory, however large)."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
from ocrmypdf.exceptions import ExitCode, ExitCodeException

logger = logging.getLogger(__name__)

RETRIED_STATUSES = frozenset({429, 503})
"""The server's "not now" answers (`overloaded`, `quota_exceeded`, shutting down)."""
FIRST_BACKOFF_S = 0.5
"""The first wait when the answer has no `Retry-After`; each retry doubles it."""
MAX_WAIT_S = 60.0
"""No single wait is longer, whatever `Retry-After` says."""
MAX_ANSWER_BYTES = 64 * 1024 * 1024
"""The most an answer may hold (`--ocr-max-answer-bytes`): a page's JSON with its words is a few
hundred KB."""
CONNECT_TIMEOUT_S = 10.0


class OcrServerError(ExitCodeException):
    """The server could not be reached, or answered an error; `status` is its HTTP status (None
    when no answer came). OCRmyPDF prints it and exits 7, as when Tesseract fails."""

    exit_code = ExitCode.child_process_error

    def __init__(self, detail: str, status: int | None = None) -> None:
        super().__init__(detail)
        self.status = status


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientSettings:
    """How the plugin reaches the server (OCRmyPDF's `--ocr-server*` options)."""

    url: str
    """The server's base URL, e.g. http://host:8000."""
    api_key: str | None = None
    """Sent as `X-API-Key` when set."""
    timeout_s: float = 300.0
    """One request's read timeout; also sent as `X-Request-Timeout`, so that the server sheds
    a page it could not finish in time at once (503 + Retry-After) instead of reading it late."""
    retries: int = 5
    """Tries after the first for a page answered 429 or 503."""
    max_answer_bytes: int = MAX_ANSWER_BYTES
    """An answer larger than this is refused (`OcrServerError`), not read on."""


def retry_wait_s(response: httpx.Response, attempt: int) -> float:
    """How long to wait before retry `attempt` (from 1): the server's `Retry-After` in seconds
    when it sent one, else a doubling backoff; at most `MAX_WAIT_S`."""
    header = response.headers.get("retry-after", "")
    try:
        wait_s = float(header)
    except ValueError:
        wait_s = math.nan
    if not math.isfinite(wait_s):  # absent, an HTTP date, or "nan" / "inf"
        wait_s = FIRST_BACKOFF_S * 2 ** (attempt - 1)
    return min(max(wait_s, 0.0), MAX_WAIT_S)


def _error_message(response: httpx.Response) -> str:
    try:
        error = response.json()["error"]
        return f"{error['code']}: {error['message']}"
    except (ValueError, KeyError, TypeError):
        return response.text[:200] or response.reason_phrase


class ServerClient:
    """One server's `/v1/ocr` and `/v1/models`; thread-safe (httpx's pool)."""

    def __init__(
        self, settings: ClientSettings, *, sleep: Callable[[float], None] = time.sleep
    ) -> None:
        self.settings = settings
        headers = {"X-API-Key": settings.api_key} if settings.api_key else {}
        self._http = httpx.Client(
            base_url=settings.url.rstrip("/"),
            headers=headers,
            timeout=httpx.Timeout(settings.timeout_s, connect=CONNECT_TIMEOUT_S),
        )
        self._sleep = sleep

    def _send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        for attempt in range(self.settings.retries + 1):
            try:
                response = self._bounded(self._http.build_request(method, path, **kwargs))
            except httpx.TransportError as err:
                raise OcrServerError(
                    f"cannot reach the OCR server at {self.settings.url}: {err!s} "
                    "(is it running? see --ocr-server)"
                ) from err
            if response.status_code not in RETRIED_STATUSES or attempt == self.settings.retries:
                break
            wait_s = retry_wait_s(response, attempt + 1)
            logger.info(
                "OCR server answered %d to %s %s; retry %d of %d in %.1f s",
                response.status_code,
                method,
                path,
                attempt + 1,
                self.settings.retries,
                wait_s,
            )
            self._sleep(wait_s)
        if response.status_code != 200:
            raise OcrServerError(
                f"OCR server {self.settings.url} answered {response.status_code} to {method} "
                f"{path}: {_error_message(response)}",
                response.status_code,
            )
        return response

    def _bounded(self, request: httpx.Request) -> httpx.Response:
        """`request`'s answer, read up to `max_answer_bytes`.

        Raises:
            OcrServerError: the answer is larger.
        """
        limit = self.settings.max_answer_bytes
        response = self._http.send(request, stream=True)
        try:
            declared = response.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > limit:
                raise self._too_large(request, limit)
            body = bytearray()
            for chunk in response.iter_bytes():
                body += chunk
                if len(body) > limit:
                    raise self._too_large(request, limit)
        finally:
            response.close()
        return httpx.Response(
            response.status_code,
            headers=response.headers,
            content=bytes(body),
            request=request,
        )

    def _too_large(self, request: httpx.Request, limit: int) -> OcrServerError:
        return OcrServerError(
            f"OCR server {self.settings.url} answered {request.method} {request.url.path} with "
            f"more than {limit} bytes (--ocr-max-answer-bytes); not read"
        )

    def ocr(self, image: bytes, params: dict[str, str]) -> dict[str, Any]:
        """The `/v1/ocr` JSON page for one page image, with `params` as query parameters."""
        response = self._send(
            "POST",
            "/v1/ocr",
            params=params,
            content=image,
            headers={
                "content-type": "application/octet-stream",
                "x-request-timeout": f"{self.settings.timeout_s:g}",
            },
        )
        page: dict[str, Any] = response.json()["pages"][0]
        return page

    def languages(self) -> set[str]:
        """The languages the server reads (`GET /v1/models`)."""
        return set(self._send("GET", "/v1/models").json()["languages"])

    def close(self) -> None:
        self._http.close()
