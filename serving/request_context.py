"""The id of the request being handled, kept in a contextvar: set by the HTTP layer's middleware
(`serving.http.request_id`), read by every log line (`serving.log_config`) and by the answers that
carry it (errors, PaddleX's `logId`). Below both, so logging needs nothing from HTTP."""

from __future__ import annotations

import contextvars
import uuid

REQUEST_ID: contextvars.ContextVar[str | None] = contextvars.ContextVar("request_id", default=None)


def current() -> str | None:
    """The id of the request being handled in this context; None outside a request."""
    return REQUEST_ID.get()


def current_or_new() -> str:
    """The current request's id, or a fresh one outside a request."""
    return REQUEST_ID.get() or uuid.uuid4().hex
