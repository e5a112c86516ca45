"""HTTP endpoints: PaddleX-compatible `/ocr`, native `/v1/ocr`, health and readiness."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from prometheus_client import CONTENT_TYPE_LATEST
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from pipelines.types import LIMIT_TYPES
from serving.config import choices_text
from serving.errors import (
    ClientGone,
    InvalidInput,
    OcrError,
    Overloaded,
    PayloadTooLarge,
    UnsupportedMediaType,
    ValidationFailed,
)
from serving.http import paddlex_api, request_id, url_fetch
from serving.http.jobs import job_routes
from serving.inputs import FileKind, frames_type, sniff_kind
from serving.request_options import ocr_options
from serving.runtime import Runtime

logger = logging.getLogger(__name__)

T = TypeVar("T")
Handler = Callable[[Request], Awaitable[Response]]


def _runtime(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


async def read_body(request: Request, max_bytes: int) -> bytes:
    """The body, refused with 413 as soon as it is known to be too large."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise PayloadTooLarge(f"Request body of {declared} bytes; the limit is {max_bytes}")
    chunks = []
    size = 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > max_bytes:
                raise PayloadTooLarge(f"Request body over the limit of {max_bytes} bytes")
            chunks.append(chunk)
    except ClientDisconnect as err:
        raise _gone_mid_upload() from err
    return b"".join(chunks)


def _gone_mid_upload() -> ClientGone:
    """The client hung up while sending the body: no failure of ours, so INFO and no traceback."""
    logger.info("client went away during the upload")
    return ClientGone("Client closed the request during the upload")


async def until_disconnect(request: Request, work: Coroutine[Any, Any, T]) -> T:
    """Await `work`, cancelling it (and so its queued items) if the client goes away."""
    task = asyncio.ensure_future(work)

    async def watch() -> None:
        while True:
            message = await request.receive()
            if message["type"] == "http.disconnect":
                return

    watcher = asyncio.ensure_future(watch())
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
    if not task.done():
        task.cancel()
        logger.info("client went away; request cancelled")
        raise ClientGone()
    return task.result()


def _as_ocr_error(exc: Exception, request_id: str) -> OcrError:
    """Our errors pass through; anything else is logged in full and answered as a bare 500."""
    if isinstance(exc, OcrError):
        return exc
    logger.error("request %s failed", request_id, exc_info=exc)
    return OcrError()


def _error_headers(err: OcrError, runtime: Runtime) -> dict[str, str]:
    if isinstance(err, Overloaded) or err.http_status == 503:
        return {"Retry-After": str(runtime.config.server.retry_after_s)}
    return {}


def _status(err: OcrError, runtime: Runtime) -> int:
    if isinstance(err, Overloaded):
        return runtime.config.server.overload_status
    return err.http_status


async def paddlex_ocr(request: Request) -> Response:
    """`POST /ocr`: PaddleX basic serving's OCR endpoint."""
    runtime = _runtime(request)
    log_id = request_id.current_or_new()
    try:
        raw = await read_body(request, runtime.config.server.max_body_bytes)
        body = paddlex_api.load_body(raw)
        log_id = paddlex_api.log_id_of(body, default=log_id)
        parsed = paddlex_api.parse_request(body)
        runtime.check_ready()
        data, kind = await _paddlex_file(parsed, runtime)
        overrides = paddlex_api.effective_overrides(parsed.overrides)
        if overrides.get("use_textline_orientation") and runtime.bundle.cls is None:
            raise ValidationFailed(
                "useTextlineOrientation is true but no textline-orientation model is configured "
                "(models.cls)"
            )
        options = ocr_options(runtime.bundle, runtime.config.pipeline, **overrides)
        visualize = (
            runtime.config.paddlex.visualize if parsed.visualize is None else parsed.visualize
        )
        pages = await until_disconnect(
            request,
            runtime.service.ocr(
                data,
                kind,
                options,
                visualize=visualize,
                timeout_s=runtime.config.server.request_timeout_s,
            ),
        )
        runtime.metrics.pages.inc(len(pages))
        result = paddlex_api.infer_result(
            pages, kind, options, parsed.overrides, frames_type=frames_type(data)
        )
        return JSONResponse(paddlex_api.envelope(log_id, result))
    except Exception as exc:  # the HTTP boundary: every failure is answered in the envelope
        error = _as_ocr_error(exc, log_id)
        status = _status(error, runtime)
        return JSONResponse(
            paddlex_api.envelope(log_id, status=status, message=error.message),
            status_code=status,
            headers=_error_headers(error, runtime),
        )


async def _paddlex_file(parsed: paddlex_api.OcrRequest, runtime: Runtime) -> tuple[bytes, FileKind]:
    if paddlex_api.is_url(parsed.file):
        if not runtime.config.input.allow_url:
            raise InvalidInput(
                "URL inputs are disabled on this server (input.allow_url); send the file as base64"
            )
        kind = parsed.file_type or url_fetch.kind_from_url(parsed.file)
        limits = url_fetch.FetchLimits(
            allowed_hosts=runtime.config.input.url_allowed_hosts,
            timeout_s=runtime.config.input.url_timeout_s,
            max_bytes=runtime.config.server.max_body_bytes,
        )
        return await url_fetch.fetch(parsed.file, limits), kind
    if parsed.file_type is None:
        raise InvalidInput("File type cannot be determined")
    return paddlex_api.decode_base64_file(parsed.file), parsed.file_type


_V1_TYPES: dict[str, FileKind] = {"application/pdf": "pdf"}


async def v1_ocr(request: Request) -> Response:
    """`POST /v1/ocr`: multipart `file`, or a raw image or PDF body."""
    runtime = _runtime(request)
    rid = request_id.current_or_new()
    try:
        runtime.check_ready()
        data, kind = await _v1_file(request, runtime)
        overrides = _v1_options(request)
        if overrides.get("use_textline_orientation") and runtime.bundle.cls is None:
            raise ValidationFailed("textline_orientation=true needs a classifier (models.cls)")
        options = ocr_options(runtime.bundle, runtime.config.pipeline, **overrides)
        pages = await until_disconnect(
            request,
            runtime.service.ocr(
                data, kind, options, timeout_s=runtime.config.server.request_timeout_s
            ),
        )
    except Exception as exc:  # the HTTP boundary: every failure is answered as JSON
        err = _as_ocr_error(exc, rid)
        return JSONResponse(
            {"error": {"code": err.code, "message": err.message, "request_id": rid}},
            status_code=_status(err, runtime),
            headers={**_error_headers(err, runtime), "X-Request-ID": rid},
        )
    runtime.metrics.pages.inc(len(pages))
    body = {
        "pages": [
            {
                "page": index,
                "width": page.result.width,
                "height": page.result.height,
                "lines": [
                    {"text": line.text, "score": float(line.score), "box": line.poly.tolist()}
                    for line in page.result.lines
                ],
            }
            for index, page in enumerate(pages)
        ]
    }
    return JSONResponse(body, headers={"X-Request-ID": rid})


async def _v1_file(request: Request, runtime: Runtime) -> tuple[bytes, FileKind]:
    limit = runtime.config.server.max_body_bytes
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type == "multipart/form-data":
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise PayloadTooLarge(f"Request body of {declared} bytes; the limit is {limit}")
        try:
            async with request.form(max_files=1, max_fields=16, max_part_size=limit) as form:
                upload = form.get("file")
                if not isinstance(upload, UploadFile):
                    raise ValidationFailed("Send the document in a multipart field named `file`")
                data = await upload.read()
                part_type = (upload.content_type or "").lower()
        except HTTPException as err:  # Starlette's multipart parser refuses the body
            if "maximum size" in err.detail:
                raise PayloadTooLarge(f"{err.detail} (server.max_body_bytes)") from err
            raise ValidationFailed(f"Malformed multipart body: {err.detail}") from err
        except ClientDisconnect as err:
            raise _gone_mid_upload() from err
    elif content_type.startswith("image/") or content_type in _V1_TYPES:
        data = await read_body(request, limit)
        part_type = content_type
    else:
        raise UnsupportedMediaType(
            f"Content type {content_type or 'none'!r}: send multipart/form-data with a `file` "
            "field, or a raw body typed image/* or application/pdf"
        )
    if not data:
        raise InvalidInput("Invalid input file: empty file")
    kind = (
        sniff_kind(data)
        or _V1_TYPES.get(part_type)
        or ("image" if part_type.startswith("image/") else None)
    )
    if kind is None:
        raise InvalidInput("Invalid input file: neither a PDF nor a supported image")
    return data, kind


_V1_FLOATS = {
    "det_thresh": "thresh",
    "det_box_thresh": "box_thresh",
    "det_unclip_ratio": "unclip_ratio",
    "score_thresh": "score_thresh",
}


def _v1_options(request: Request) -> dict[str, Any]:
    params = request.query_params
    overrides: dict[str, Any] = {}
    try:
        for name, option in _V1_FLOATS.items():
            if name in params:
                overrides[option] = float(params[name])
        if "det_limit_side_len" in params:
            overrides["limit_side_len"] = int(params["det_limit_side_len"])
    except ValueError as err:
        raise ValidationFailed(f"Bad query parameter: {err}") from err
    if "det_limit_type" in params:
        if params["det_limit_type"] not in LIMIT_TYPES:
            raise ValidationFailed(f"det_limit_type must be {choices_text(LIMIT_TYPES)}")
        overrides["limit_type"] = params["det_limit_type"]
    if "textline_orientation" in params:
        overrides["use_textline_orientation"] = params["textline_orientation"] in ("1", "true")
    return overrides


def observed(endpoint: str, handler: Handler) -> Handler:
    """Count and time an endpoint's answers in `ocr_requests_total` and `ocr_request_seconds`."""

    async def wrapper(request: Request) -> Response:
        metrics = _runtime(request).metrics
        started = time.monotonic()
        response = await handler(request)
        metrics.request_seconds.labels(endpoint=endpoint).observe(time.monotonic() - started)
        metrics.requests.labels(endpoint=endpoint, status=str(response.status_code)).inc()
        return response

    return wrapper


async def metrics(request: Request) -> Response:
    """`GET /metrics`: Prometheus text format."""
    return Response(_runtime(request).metrics.render(), media_type=CONTENT_TYPE_LATEST)


async def health(request: Request) -> Response:
    """`GET /health`: PaddleX's liveness answer."""
    return JSONResponse(
        {"logId": request_id.current_or_new(), "errorCode": 0, "errorMsg": "Healthy"}
    )


async def livez(request: Request) -> Response:
    """`GET /livez`: the process answers."""
    return JSONResponse({"status": "alive"})


async def readyz(request: Request) -> Response:
    """`GET /readyz`: 200 once every device worker has loaded its models and run a warm-up page."""
    runtime = _runtime(request)
    workers = {
        w.spec.name: {"ready": w.ready, "pid": w.pid, "restarts": w.restarts}
        for w in runtime.devices.workers
    }
    body: dict[str, Any] = {
        "ready": runtime.ready,
        "devices": workers,
        "cpu_workers": {"pids": runtime.cpu.pids(), "restarts": runtime.cpu.restarts},
        "admission": runtime.service.admission.describe(),
        "memory_budget": runtime.service.budget.describe(),
        "cost_model": runtime.scheduler.placement.model.describe(),
    }
    if runtime.startup_error:
        body["error"] = runtime.startup_error
    return JSONResponse(body, status_code=200 if runtime.ready else 503)


ROUTES = [
    Route("/ocr", observed("/ocr", paddlex_ocr), methods=["POST"]),
    Route("/v1/ocr", observed("/v1/ocr", v1_ocr), methods=["POST"]),
    Route("/metrics", metrics, methods=["GET"]),
    Route("/health", health, methods=["GET"]),
    Route("/livez", livez, methods=["GET"]),
    Route("/readyz", readyz, methods=["GET"]),
    *job_routes(observed),
]
