"""Request ids: taken from `X-Request-ID` or made, kept in `serving.request_context` for the
request's log lines and answers, echoed in the response."""

from __future__ import annotations

import logging
import re
import time
import uuid

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from serving.request_context import REQUEST_ID

HEADER = "X-Request-ID"
QUIET_PATHS = ("/livez", "/readyz", "/health", "/metrics", "/static/")
"""Probes, scrapes and page assets: their access lines are DEBUG, the others INFO."""

access_logger = logging.getLogger("serving.access")

# A client's id is kept only when it is short and plain, so it cannot forge log lines.
_ACCEPTED = re.compile(r"[A-Za-z0-9._:/+=@-]{1,128}")


def accepted(value: str | None) -> str | None:
    """A client-sent id when it is acceptable, else None."""
    if value is not None and _ACCEPTED.fullmatch(value):
        return value
    return None


class RequestIdMiddleware:
    """Pure ASGI middleware: every HTTP request gets an id, visible to handlers and log records
    through `serving.request_context.current()`, and returned in the `X-Request-ID` response
    header; one access line is logged per request when it ends (`serving.access`)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        sent = None
        for name, value in scope["headers"]:
            if name == b"x-request-id":
                sent = value.decode("latin-1")
                break
        request_id = accepted(sent) or uuid.uuid4().hex

        status = 0

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = MutableHeaders(scope=message)
                headers[HEADER] = request_id
            await send(message)

        token = REQUEST_ID.set(request_id)
        started = time.monotonic()
        try:
            await self.app(scope, receive, send_with_id)
        finally:
            path: str = scope["path"]
            quiet = status < 400 and path.startswith(QUIET_PATHS)
            access_logger.log(
                logging.DEBUG if quiet else logging.INFO,
                "%s %s %d %.1fms",
                scope["method"],
                path,
                status,
                (time.monotonic() - started) * 1000,
            )
            REQUEST_ID.reset(token)
