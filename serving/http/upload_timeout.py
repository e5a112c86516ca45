"""Slow and stalled uploads: a request body must keep arriving, and arrive whole in time.

Uvicorn waits for body bytes forever, so one client that opens a request and stops sending (or
sends a byte a minute) holds a connection and a handler. This middleware times each wait for the
next body chunk (`server.upload_idle_timeout_s`) and the whole body (`server.upload_timeout_s`);
past either, reading the body raises `UploadTimeout` (408), which the endpoint answers in its own
error envelope, and uvicorn closes the connection since the body was never read to its end.
"""

from __future__ import annotations

import asyncio
import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from serving.errors import UploadTimeout


class UploadTimeoutMiddleware:
    """Pure ASGI middleware wrapping `receive` until the last body chunk has arrived."""

    def __init__(self, app: ASGIApp, *, idle_timeout_s: float, total_timeout_s: float) -> None:
        self.app = app
        self.idle_timeout_s = idle_timeout_s
        self.total_timeout_s = total_timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        deadline = time.monotonic() + self.total_timeout_s
        body_done = False

        async def timed_receive() -> Message:
            nonlocal body_done
            if body_done:  # afterwards only disconnects arrive; waiting for them is fine
                return await receive()
            left_s = deadline - time.monotonic()
            wait_s = min(self.idle_timeout_s, left_s)
            try:
                message = await asyncio.wait_for(receive(), timeout=max(wait_s, 0.0))
            except TimeoutError:
                raise UploadTimeout(_why(wait_s < self.idle_timeout_s, wait_s)) from None
            if message["type"] != "http.request" or not message.get("more_body", False):
                body_done = True
            return message

        await self.app(scope, timed_receive, send)


def _why(total: bool, wait_s: float) -> str:
    if total:
        return "Request body not received within server.upload_timeout_s"
    return f"Request body stalled: no bytes for {wait_s:g} s (server.upload_idle_timeout_s)"
