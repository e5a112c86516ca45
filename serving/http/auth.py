"""Access control: optional API keys, checked by a pure ASGI middleware before any route runs;
each key is an identity (`serving.http.keys`) with its own request rate."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from serving.errors import QuotaExceeded
from serving.http.exceptions import send_refusal
from serving.http.key_reload import KeyReloader
from serving.http.keys import ApiKey, Identity, identify
from serving.metrics import Metrics
from serving.scheduling.quotas import RateLimits

logger = logging.getLogger(__name__)

PROBE_PATHS = frozenset(("/livez", "/readyz", "/health"))
"""Never need a key: orchestrators probe them without credentials."""
METRICS_PATH = "/metrics"
UNAUTHENTICATED = "-"
"""The `key` label of requests refused for a missing or unknown key (no key id starts so)."""
WWW_AUTHENTICATE = [(b"www-authenticate", b'Bearer realm="ocr"')]


def sent_key(headers: Iterable[tuple[bytes, bytes]]) -> bytes | None:
    """The key in `X-API-Key`, else in `Authorization: Bearer KEY`; None when neither is sent."""
    bearer = None
    for name, value in headers:
        if name == b"x-api-key":
            return value.strip()
        if name == b"authorization":
            scheme, _, token = value.strip().partition(b" ")
            if scheme.lower() == b"bearer" and token.strip():
                bearer = token.strip()
    return bearer


class ApiKeyMiddleware:
    """Pure ASGI middleware: HTTP requests without a valid key get 401, except on the probes
    (and `/metrics` unless `protect_metrics`); a key past its request rate gets 429. The key's
    `Identity` goes in `scope["auth"]` for the handlers. With no keys it passes everything
    through (one anonymous tenant, no `scope["auth"]`)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        keys: tuple[ApiKey, ...],
        protect_metrics: bool,
        metrics: Metrics | None = None,
        clock: Callable[[], float] = time.monotonic,
        reloader: KeyReloader | None = None,
    ) -> None:
        self.app = app
        self.keys = keys
        self.reloader = reloader
        """Reads the keys again when their files change (`serving.http.key_reload`)."""
        self.exempt = PROBE_PATHS if protect_metrics else PROBE_PATHS | {METRICS_PATH}
        self.metrics = metrics
        self.rates = RateLimits()
        self._clock = clock

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.keys:
            await self.app(scope, receive, send)
            return
        if self.reloader is not None:
            self.keys = self.reloader.refresh(self.keys)
        if scope["path"] in self.exempt:
            # No key needed; one sent anyway names its caller (an admin's `/readyz` shows detail).
            sent = sent_key(scope["headers"])
            identity = None if sent is None else identify(sent, self.keys)
            if identity is not None:
                scope["auth"] = identity
            await self.app(scope, receive, send)
            return
        sent = sent_key(scope["headers"])
        identity = None if sent is None else identify(sent, self.keys)
        if identity is None:
            reason = "missing" if sent is None else "invalid"
            logger.warning("refused %s %s: API key %s", scope["method"], scope["path"], reason)
            self._count(UNAUTHENTICATED, 401)
            message = (
                f"API key {reason}: send it in the X-API-Key header or as Authorization: Bearer KEY"
            )
            await send_refusal(send, scope["path"], 401, "unauthorized", message, WWW_AUTHENTICATE)
            return
        try:
            self.rates.take(identity.id, identity.quota, self._clock())
        except QuotaExceeded as err:
            logger.info("refused %s %s: %s", scope["method"], scope["path"], err.message)
            self._count(identity.id, 429)
            retry = [(b"retry-after", str(math.ceil(err.retry_after_s or 1)).encode("ascii"))]
            await send_refusal(send, scope["path"], 429, err.code, err.message, retry)
            return
        scope["auth"] = identity

        async def counted(message: Message) -> None:
            if message["type"] == "http.response.start":
                self._count(identity.id, message["status"])
            await send(message)

        await self.app(scope, receive, counted)

    def _count(self, key_id: str, status: int) -> None:
        if self.metrics is not None:
            self.metrics.key_requests.labels(key=key_id, status=str(status)).inc()


def identity_of(request: Request) -> Identity | None:
    """Who sent `request`; None when authentication is off (everyone is one anonymous tenant)."""
    identity = request.scope.get("auth")
    return identity if isinstance(identity, Identity) else None
