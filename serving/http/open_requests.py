"""How many requests, and results streams, one client holds open at once.

`server.limit_concurrency` caps the API's requests in all, so one client (a key, or with keys
off an address) could hold every one of them: a results stream that follows a job lasts as long
as the job, and a slow body or a slow reader up to their timeouts (issue 49, item 4). Now each
client holds at most `auth.max_open_requests` requests (`OpenRequestsMiddleware`, inside the key
check, so a key's identity is known) and `auth.max_open_streams` following results streams
(`HeldStream`); past either, 429 `quota_exceeded` with `Retry-After`, in the endpoint's format.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from serving.errors import QuotaExceeded
from serving.http.exceptions import send_refusal
from serving.http.keys import Identity
from serving.http.listeners import PROBES
from serving.scheduling.quotas import ClientSlots
from serving.scheduling.retry_after import retry_after_s

logger = logging.getLogger(__name__)


def client_of(scope: Scope) -> str:
    """Who a request counts for: its API key's id, or its address with keys off."""
    identity = scope.get("auth")
    if isinstance(identity, Identity):
        return f"key:{identity.id}"
    client = scope.get("client")
    return f"address:{client[0] if client else ''}"


class OpenRequestsMiddleware:
    """Pure ASGI middleware: at most `slots.per_client` API requests of one client running at
    once (the probes not counted); past it, 429 `quota_exceeded` with `Retry-After`."""

    def __init__(self, app: ASGIApp, *, slots: ClientSlots, retry_after_s: int) -> None:
        self.app = app
        self.slots = slots
        self.retry_after_s = retry_after_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in PROBES or not self.slots.per_client:
            await self.app(scope, receive, send)
            return
        client = client_of(scope)
        try:
            self.slots.take(client)
        except QuotaExceeded as err:
            logger.info("refused %s %s: %s", scope["method"], scope["path"], err.message)
            retry = [(b"retry-after", str(retry_after_s(self.retry_after_s)).encode())]
            await send_refusal(send, scope["path"], 429, err.code, err.message, retry)
            return
        try:
            await self.app(scope, receive, send)
        finally:
            self.slots.release(client)


class HeldStream(StreamingResponse):
    """A streamed answer that holds one of its client's `slots` until it has ended, however
    it ends (sent whole, the client gone, an error)."""

    def __init__(self, *args: Any, release: Callable[[], None], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._release = release

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._release()


def hold_stream(request: Request, slots: ClientSlots) -> Callable[[], None]:
    """Take one of the request's client's `slots` for a stream; returns its release.

    Raises:
        QuotaExceeded: the client holds `slots.per_client` streams already (429).
    """
    client = client_of(request.scope)
    slots.take(client)
    held = [True]

    def release() -> None:
        if held.pop() if held else False:
            slots.release(client)

    return release
