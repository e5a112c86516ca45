"""HTTP endpoints: PaddleX-compatible `/ocr`, native `/v1/ocr`, health and readiness."""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from serving import request_context, tracing
from serving.config import AppConfig
from serving.decode.readers import FileKind, frames_type
from serving.errors import InvalidInput
from serving.http import json_body, ocr_outputs, paddlex_api, url_fetch
from serving.http.answers import charged_json
from serving.http.auth import identity_of
from serving.http.body_limit import PADDLEX, RAW, body_charge_of, limit_body
from serving.http.endpoints import (
    budget_of,
    config_of,
    from_loopback,
    metrics_of,
    observed,
    ocr_of,
    readiness_of,
    renderer_of,
    timeout_of,
    until_disconnect,
)
from serving.http.exceptions import native_errors, paddlex_error
from serving.http.jobs import job_routes
from serving.http.params import NO_QUERY, OCR_QUERY, known_query
from serving.http.uploads import read_body, read_upload
from serving.request_options import NO_CLASSIFIER, query_overrides
from serving.scheduling.memory_budget import BodyCharge


async def paddlex_ocr(request: Request) -> Response:
    """`POST /ocr`: PaddleX basic serving's OCR endpoint."""
    config = config_of(request)
    ocr = ocr_of(request)
    log_id = request_context.current_or_new()
    fetched = BodyCharge(budget_of(request), copies=2)  # a URL's file, held as a raw body is
    try:
        paddlex_api.check_content_type(request.headers.get("content-type", ""))
        raw = await read_body(request)
        # Refuses JSON bombs unparsed, off the event loop; charges what the parse takes.
        body = await json_body.load(raw, body_charge_of(request))
        del raw  # not held while the document runs (`body_limit.PADDLEX` counts what is)
        log_id = paddlex_api.log_id_of(body, default=log_id)
        parsed = paddlex_api.parse_request(body)
        timeout_s = timeout_of(request, config.server.request_timeout_s)
        ocr.check_ready()
        data, kind = await _paddlex_file(parsed, config, fetched)
        options = ocr.options(
            # Page orientation as PaddleX's OCR pipeline: off unless useDocOrientationClassify.
            {"orientation": "off", **paddlex_api.effective_overrides(parsed.overrides)},
            no_classifier=paddlex_api.NO_CLASSIFIER,
        )
        visualize = config.paddlex.visualize if parsed.visualize is None else parsed.visualize
        pages = await until_disconnect(
            request,
            ocr.ocr(
                data,
                kind,
                options,
                visualize=visualize,
                timeout_s=timeout_s,
                tenant=identity_of(request),
            ),
        )
        result = paddlex_api.infer_result(
            pages,
            kind,
            options,
            parsed.overrides,
            frames_type=frames_type(data),
            return_word_box=parsed.return_word_box,
        )
        # Its pictures may be megabytes: charged until the client has read them.
        return await charged_json(paddlex_api.envelope(log_id, result), budget=budget_of(request))
    except Exception as exc:  # the HTTP boundary: every failure is answered in the envelope
        return paddlex_error(exc, log_id, config.server)
    finally:
        fetched.release()


async def _paddlex_file(
    parsed: paddlex_api.OcrRequest, config: AppConfig, fetched: BodyCharge
) -> tuple[bytes, FileKind]:
    if paddlex_api.is_url(parsed.file):
        if not config.input.allow_url:
            raise InvalidInput(
                "URL inputs are disabled on this server (input.allow_url); send the file as base64"
            )
        kind = parsed.file_type or url_fetch.kind_from_url(parsed.file)
        limits = url_fetch.FetchLimits(
            allowed_hosts=config.input.url_allowed_hosts,
            timeout_s=config.input.url_timeout_s,
            max_bytes=config.server.max_body_bytes,
            allowed_ports=config.input.url_allowed_ports,
        )
        return await url_fetch.fetch(parsed.file, limits, charge=fetched), kind
    if parsed.file_type is None:
        raise InvalidInput("File type cannot be determined")
    return paddlex_api.decode_base64_file(parsed.file), parsed.file_type


async def v1_ocr(request: Request) -> Response:
    """`POST /v1/ocr`: multipart `file`, or a raw image or PDF body; answered as JSON, text,
    hOCR, ALTO or a searchable PDF (`?format=` or `Accept`: `serving.http.ocr_outputs`)."""
    ocr = ocr_of(request)
    want = ocr_outputs.wanted(request)
    timeout_s = timeout_of(request, config_of(request).server.request_timeout_s)
    ocr.check_ready()
    data, kind, name = await read_upload(request)
    options = ocr.options(query_overrides(request.query_params), no_classifier=NO_CLASSIFIER)
    pages = await until_disconnect(
        request, ocr.ocr(data, kind, options, timeout_s=timeout_s, tenant=identity_of(request))
    )
    with tracing.span("outputs"):
        return await ocr_outputs.answer(renderer_of(request), pages, data, kind, want, name=name)


async def v1_models(request: Request) -> Response:
    """`GET /v1/models`: the model sets served, with their languages, models, devices and
    precision, the default, and the configured sets left out with why."""
    return JSONResponse(readiness_of(request).describe_models())


async def metrics(request: Request) -> Response:
    """`GET /metrics`: Prometheus text format. The per-key series, which name every tenant, go to
    admin keys only: `/metrics` is open by default (`auth.protect_metrics`), and a user key may
    not learn the others' ids either."""
    identity = identity_of(request)
    tenants = identity is not None and identity.role == "admin"
    return Response(metrics_of(request).render(tenants=tenants), media_type=CONTENT_TYPE_LATEST)


async def health(request: Request) -> Response:
    """`GET /health`: PaddleX's liveness answer."""
    return JSONResponse(paddlex_api.envelope(request_context.current_or_new(), message="Healthy"))


async def livez(request: Request) -> Response:
    """`GET /livez`: the process answers."""
    return JSONResponse({"status": "alive"})


async def readyz(request: Request) -> Response:
    """`GET /readyz`: 200 once every device worker has loaded its models and run a warm-up page.

    The state of every part (pids, restarts, admission, the start-up error) goes to loopback
    callers (the container's health check, `kubectl port-forward`, an operator on the machine)
    and to an admin key's; anyone else, the kubelet's probes and user keys included, gets
    `{"ready": ...}` and the status.
    """
    readiness = readiness_of(request)
    status = 200 if readiness.ready else 503
    identity = identity_of(request)
    if from_loopback(request) or (identity is not None and identity.role == "admin"):
        return JSONResponse(readiness.describe(), status_code=status)
    return JSONResponse({"ready": readiness.ready}, status_code=status)


ROUTES = [
    Route("/ocr", observed("/ocr", limit_body(PADDLEX, paddlex_ocr)), methods=["POST"]),
    Route(
        "/v1/ocr",
        observed("/v1/ocr", limit_body(RAW, native_errors(known_query(OCR_QUERY, v1_ocr)))),
        methods=["POST"],
    ),
    Route(
        "/v1/models",
        observed("/v1/models", native_errors(known_query(NO_QUERY, v1_models))),
        methods=["GET"],
    ),
    Route("/metrics", metrics, methods=["GET"]),
    Route("/health", health, methods=["GET"]),
    Route("/livez", livez, methods=["GET"]),
    Route("/readyz", readyz, methods=["GET"]),
    *job_routes(observed),
]
