"""Exception handling at the HTTP boundary: each API's error format, rendered here once.

The native format (`/v1/ocr`, `/v1/render`, `/v1/jobs`, and the 401s and 429s of `auth`) is
`{"error": {"code", "message", "request_id"}}`; PaddleX's `/ocr` answers in its envelope, with the
HTTP status as `errorCode`. Either way the status is the error's own (`OcrError.http_status`),
except that shed work answers `server.overload_status`; every 503, and a key's 429 (over its
quota), carries `Retry-After`.
Anything that is not an `OcrError` is logged with its traceback and answered as a bare 500.
Starlette's own refusals (no such route, a method the route does not take) are answered in the
same formats, saying where to go (`route_error`), where they used to be plain text.
"""

from __future__ import annotations

import difflib
import json
import logging
import math
from collections.abc import Iterable, Mapping
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.types import Send

from serving import request_context
from serving.config import ServerConfig
from serving.errors import OcrError, Overloaded, QuotaExceeded
from serving.http import paddlex_api
from serving.http.endpoints import Handler, config_of
from serving.scheduling.retry_after import retry_after_s

logger = logging.getLogger(__name__)


def as_ocr_error(exc: Exception, request_id: str) -> OcrError:
    """Our errors pass through; anything else is logged in full and answered as a bare 500."""
    if isinstance(exc, OcrError):
        return exc
    logger.error("request %s failed", request_id, exc_info=exc)
    return OcrError()


def status_of(err: OcrError, server: ServerConfig) -> int:
    """The HTTP status that answers `err`."""
    if isinstance(err, Overloaded):
        return server.overload_status
    return err.http_status


def retry_after(err: OcrError, server: ServerConfig) -> dict[str, str]:
    """`Retry-After` for shed work, a key over its quota and every 503 (spread, and from the
    server's state where known: `serving.scheduling.retry_after`); no header otherwise."""
    if isinstance(err, QuotaExceeded) and err.retry_after_s is not None:
        return {"Retry-After": str(math.ceil(err.retry_after_s))}
    if isinstance(err, Overloaded | QuotaExceeded) or err.http_status == 503:
        hint = err.retry_after_s if isinstance(err, Overloaded) else None
        return {"Retry-After": str(retry_after_s(server.retry_after_s, hint))}
    return {}


def native_body(code: str, message: str, request_id: str) -> dict[str, Any]:
    """The native API's error body."""
    return {"error": {"code": code, "message": message, "request_id": request_id}}


PADDLEX_PATHS = frozenset(("/ocr",))
"""Answered in PaddleX's envelope (`errorCode` = the status) rather than `{"error": ...}`."""


async def send_refusal(
    send: Send,
    path: str,
    status: int,
    code: str,
    message: str,
    headers: Iterable[tuple[bytes, bytes]] = (),
) -> None:
    """A refusal written straight to ASGI `send`, in the format of the API at `path`: for pure
    ASGI middleware that answers before any route runs (keys, quotas, hosts)."""
    rid = request_context.current_or_new()
    if path in PADDLEX_PATHS:
        body = paddlex_api.envelope(rid, status=status, message=message)
    else:
        body = native_body(code, message, rid)
    payload = json.dumps(body).encode("utf-8")
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode("ascii")),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})


def native_error(exc: Exception, server: ServerConfig) -> JSONResponse:
    """`exc` answered in the native format, under the current request's id (which
    `RequestIdMiddleware` also returns in `X-Request-ID`)."""
    rid = request_context.current_or_new()
    err = as_ocr_error(exc, rid)
    return JSONResponse(
        native_body(err.code, err.message, rid),
        status_code=status_of(err, server),
        headers=retry_after(err, server),
    )


def paddlex_error(exc: Exception, log_id: str, server: ServerConfig) -> JSONResponse:
    """`exc` answered in PaddleX's envelope, under the request's `logId`."""
    err = as_ocr_error(exc, log_id)
    status = status_of(err, server)
    return JSONResponse(
        paddlex_api.envelope(log_id, status=status, message=err.message),
        status_code=status,
        headers=retry_after(err, server),
    )


def native_errors(handler: Handler) -> Handler:
    """`handler`, with every failure answered in the native format."""

    async def wrapper(request: Request) -> Response:
        try:
            return await handler(request)
        except Exception as exc:  # the HTTP boundary: every failure is answered as JSON
            return native_error(exc, config_of(request).server)

    return wrapper


ROUTE_HINTS: Mapping[str, str] = {
    "/ocr": "a JSON body (PaddleX's: file as base64, fileType 0 for a PDF, 1 for an image); "
    "multipart and raw files go to POST /v1/ocr",
    "/v1/ocr": "the document as multipart field `file`, or as the raw body; the page to try "
    "it in a browser is GET /",
    "/v1/render": "the document as /v1/ocr takes it, ?page=N from 0",
    "/v1/jobs": "multipart `file` parts to submit a job (POST), or nothing to list them (GET)",
}
"""What a route takes, for the 405 of a method it does not."""


def _route_paths(routes: Iterable[BaseRoute]) -> list[str]:
    return [route.path for route in routes if isinstance(route, Route)]


def not_found_message(method: str, path: str, routes: Iterable[BaseRoute]) -> str:
    """404's message: the nearest served path when one is near, and where every route is."""
    shown = path[:100]
    near = difflib.get_close_matches(path, _route_paths(routes), n=1, cutoff=0.75)
    hint = f"; did you mean {near[0]}?" if near else "."
    return f"No route {method} {shown}{hint} Every route: GET /openapi.json (to read: GET /docs)"


def method_message(method: str, path: str, allowed: str) -> str:
    """405's message: the methods the route takes, and what it takes."""
    methods = ", ".join(m for m in allowed.split(", ") if m != "HEAD") or allowed
    hint = ROUTE_HINTS.get(path)
    return f"{path} does not take {method}: it takes {methods}" + (f" ({hint})" if hint else "")


async def route_error(request: Request, exc: Exception) -> Response:
    """Starlette's `HTTPException`s (no route: 404; a method the route does not take: 405 with
    `Allow`; a malformed form that no endpoint caught: 400) as JSON: PaddleX's envelope on
    `/ocr`, the native format elsewhere, as every other error; they were plain text."""
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    headers = dict(exc.headers or {}) if isinstance(exc, HTTPException) else {}
    path = request.url.path
    if status == 404:
        code, message = "not_found", not_found_message(request.method, path, request.app.routes)
    elif status == 405:
        code = "method_not_allowed"
        message = method_message(request.method, path, headers.get("Allow", ""))
    else:
        code = "http_error"
        message = exc.detail if isinstance(exc, HTTPException) else "Internal Server Error"
    rid = request_context.current_or_new()
    if path in PADDLEX_PATHS:
        body = paddlex_api.envelope(rid, status=status, message=message)
    else:
        body = native_body(code, message, rid)
    return JSONResponse(body, status_code=status, headers=headers)


EXCEPTION_HANDLERS = {HTTPException: route_error}
"""The app's `exception_handlers` (`serving.app.build_app`)."""
