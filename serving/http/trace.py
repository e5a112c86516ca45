"""The span of each HTTP request (`serving.tracing`), continuing a W3C `traceparent` it carries;
in the stack only while tracing is on (`serving.app.middleware`)."""

from __future__ import annotations

from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from serving import tracing
from serving.http.request_id import HEADER

TRACE_HEADERS = (b"traceparent", b"tracestate")


class TraceMiddleware:
    """Pure ASGI middleware, outside the request ids (so the access line is in the span): one
    server span a request, named by its route (`POST /v1/jobs/{job_id}`), with its status and
    request id."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not tracing.enabled():
            await self.app(scope, receive, send)
            return
        sent = {
            name.decode("latin-1"): value.decode("latin-1")
            for name, value in scope["headers"]
            if name in TRACE_HEADERS
        }
        method, path = scope["method"], scope["path"]
        attributes = {"http.request.method": method, "url.path": path}
        with tracing.server_span(f"{method} {path}", sent, attributes) as span:
            status = 0

            async def observed(message: Message) -> None:
                nonlocal status
                if message["type"] == "http.response.start":
                    status = message["status"]
                    for name, value in message.get("headers", ()):
                        if name.decode("latin-1").lower() == HEADER.lower():
                            span_set(span, "ocr.request_id", value.decode("latin-1"))
                await send(message)

            try:
                await self.app(scope, receive, observed)
            finally:
                if span is not None:
                    span.update_name(f"{method} {route_of(scope)}")
                    span.set_attribute("http.response.status_code", status)
                    if status >= 500:
                        from opentelemetry.trace import StatusCode

                        span.set_status(StatusCode.ERROR)


def span_set(span: Any, key: str, value: str) -> None:
    if span is not None:
        span.set_attribute(key, value)


def route_of(scope: Scope) -> str:
    """The request's path with its path parameters' values put back as `{name}`: one span name
    per route, not one per job."""
    path: str = scope["path"]
    for name, value in (scope.get("path_params") or {}).items():
        path = path.replace(str(value), f"{{{name}}}")
    return path
