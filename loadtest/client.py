"""HTTP side of the load generator: one OCR request per call, for each API it speaks."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args
from urllib.parse import urlencode

import httpx

from loadtest.documents import Document

__all__ = [
    "Api",
    "Outcome",
    "PreparedRequest",
    "count_pages",
    "prepare_request",
    "response_texts",
    "send",
]

Api = Literal["paddlex", "v1", "rapidocr"]
API_NAMES: tuple[str, ...] = get_args(Api)

_PADDLEX_FILE_TYPE = {"pdf": 0, "image": 1}


@dataclass(frozen=True, slots=True)
class PreparedRequest:
    """A request body built once per document, so the send loop spends no CPU on encoding."""

    path: str
    body: bytes
    headers: dict[str, str]


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one request gave.

    Attributes:
        ok: The server answered with a success.
        pages: Pages in a successful response (0 otherwise).
        latency_s: From sending the request to having read the whole response.
        error: Why it failed: ``http_<status>``, ``errorCode_<code>`` (PaddleX envelope),
            ``invalid_body``, or the exception's type name (``ConnectError``, ``TimeoutError``).
        texts: A success's recognised lines (``response_texts``), to compare answers with the
            server's own answer to a lone request; ``None`` for a failure.
    """

    ok: bool
    pages: int
    latency_s: float
    error: str | None = None
    texts: tuple[str, ...] | None = None


def prepare_request(
    api: Api, document: Document, query: Mapping[str, str] | None = None
) -> PreparedRequest:
    """The path, body and headers that send ``document`` to the ``api`` endpoint; ``query``:
    the ``v1`` API's query options (``{"model": "PP-OCRv5_mobile"}``).

    Raises:
        ValueError: ``query`` for another API than ``v1``, or a PDF for RapidOCR's.
    """
    if query and api != "v1":
        raise ValueError(f"query options are for the v1 API, not {api}")
    if api == "paddlex":
        payload = {
            "file": base64.b64encode(document.data).decode("ascii"),
            "fileType": _PADDLEX_FILE_TYPE[document.kind],
            "visualize": False,
        }
        # Serialised once here rather than with httpx's json= on every send: base64 of a large
        # PDF would otherwise cost the event loop milliseconds per request and skew latencies.
        body = json.dumps(payload).encode("utf-8")
        return PreparedRequest("/ocr", body, {"content-type": "application/json"})
    if api == "rapidocr":
        # rapidocr_api's /ocr: a multipart `image_file`, decoded with PIL (images only).
        if document.kind != "image":
            raise ValueError(f"RapidOCR's API server takes images only, not {document.name}")
        files = {"image_file": (document.name, document.data, document.content_type)}
        multipart = httpx.Request("POST", "/ocr", files=files)
        body = multipart.read()
        return PreparedRequest("/ocr", body, {"content-type": multipart.headers["content-type"]})
    path = f"/v1/ocr?{urlencode(query)}" if query else "/v1/ocr"
    return PreparedRequest(path, document.data, {"content-type": document.content_type})


def count_pages(api: Api, status_code: int, body: Any) -> tuple[int, str | None]:
    """Pages in a response, or why it is not a success.

    Args:
        api: The API that answered.
        status_code: The HTTP status.
        body: The decoded JSON body (``None`` when it was not JSON).

    Returns:
        ``(pages, None)`` on success, ``(0, error_key)`` otherwise.
    """
    if status_code != 200:
        return 0, f"http_{status_code}"
    try:
        if api == "paddlex":
            code = body["errorCode"]
            if code != 0:
                return 0, f"errorCode_{code}"
            return len(body["result"]["ocrResults"]), None
        if api == "rapidocr":
            # One image, one page: {"0": {"rec_txt": ...}, ...}, or {} when it found no text.
            return (1, None) if isinstance(body, dict) else (0, "invalid_body")
        return len(body["pages"]), None
    except (KeyError, TypeError):
        return 0, "invalid_body"


def response_texts(api: Api, body: Any) -> list[str]:
    """The recognised lines of a successful one-page response, in the server's order.

    Raises:
        KeyError, TypeError, ValueError: The body is not that API's success shape.
    """
    if api == "paddlex":
        return list(body["result"]["ocrResults"][0]["prunedResult"]["rec_texts"])
    if api == "rapidocr":
        return [str(body[key]["rec_txt"]) for key in sorted(body, key=int)]
    return [str(line["text"]) for page in body["pages"] for line in page["lines"]]


async def send(
    client: httpx.AsyncClient, api: Api, request: PreparedRequest, *, timeout_s: float
) -> Outcome:
    """Send one request and classify the answer; transport failures become error outcomes.

    ``timeout_s`` bounds the whole exchange: httpx's own timeout applies to each network
    operation separately, so a slowly trickling response could otherwise outlast it.
    """
    started = time.monotonic()
    try:
        async with asyncio.timeout(timeout_s):
            response = await client.post(
                request.path, content=request.body, headers=request.headers
            )
    except (httpx.HTTPError, TimeoutError) as err:
        return Outcome(False, 0, time.monotonic() - started, type(err).__name__)
    latency_s = time.monotonic() - started
    try:
        body = response.json() if response.status_code == 200 else None
    except (json.JSONDecodeError, UnicodeDecodeError):
        return Outcome(False, 0, latency_s, "invalid_body")
    pages, error = count_pages(api, response.status_code, body)
    if error is not None:
        return Outcome(False, pages, latency_s, error)
    try:
        texts = tuple(response_texts(api, body))
    except (KeyError, TypeError, ValueError, IndexError):
        texts = None
    return Outcome(True, pages, latency_s, None, texts)
