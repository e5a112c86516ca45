"""Slow and stalled uploads: a request body must keep arriving, and arrive whole in time.

Uvicorn waits for body bytes forever, so one client that opens a request and stops sending (or
sends a byte a minute) holds a connection and a handler. This middleware times each wait for the
next body chunk (`server.upload_idle_timeout_s`) and the whole body (`server.upload_timeout_s`);
past either, reading the body raises `UploadTimeout` (408), which the endpoint answers in its own
error envelope, and uvicorn closes the connection since the body was never read to its end.

A body trickling a byte every 29 s passed the idle timeout and lasted until the total one (600
s): 256 such sockets from each of 8 addresses filled `server.max_connections` (issue 49, item
4). So a body must also arrive at `server.upload_min_bytes_per_s` on average, counted from its
start once `upload_idle_timeout_s` has passed (nginx has no such rate; Apache's mod_reqtimeout
has `MinRate`): the wait for the next chunk ends when the bytes so far fall behind that rate.
"""

from __future__ import annotations

import asyncio
import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from serving.errors import UploadTimeout

_FLOOR_S = 0.05
_TIE_S = 0.5


def _has_body(scope: Scope) -> bool:
    """Whether the request announces a body (`Content-Length` over 0, or chunked)."""
    for name, value in scope.get("headers", ()):
        if name == b"transfer-encoding" or (name == b"content-length" and value.strip() != b"0"):
            return True
    return False


class UploadTimeoutMiddleware:
    """Pure ASGI middleware wrapping `receive` until the last body chunk has arrived."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        idle_timeout_s: float,
        total_timeout_s: float,
        min_bytes_per_s: float = 0.0,
    ) -> None:
        self.app = app
        self.idle_timeout_s = idle_timeout_s
        self.total_timeout_s = total_timeout_s
        self.min_bytes_per_s = min_bytes_per_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not _has_body(scope):
            await self.app(scope, receive, send)  # nothing to wait for: a GET's empty message
            return
        started = time.monotonic()
        deadline = started + self.total_timeout_s
        body_done = False
        received = 0

        async def timed_receive() -> Message:
            nonlocal body_done, received
            if body_done:  # afterwards only disconnects arrive; waiting for them is fine
                return await receive()
            now = time.monotonic()
            waits = {"total": deadline - now, "idle": self.idle_timeout_s}
            if self.min_bytes_per_s:
                # When the bytes so far fall behind the rate (after the grace); a stall that
                # the idle timeout ends about as soon is told as a stall.
                behind_at = started + self.idle_timeout_s + received / self.min_bytes_per_s
                if behind_at - now < self.idle_timeout_s - _TIE_S:
                    waits["rate"] = behind_at - now
            why = min(waits, key=waits.__getitem__)
            try:
                # A floor: a chunk that waits in uvicorn's buffer is taken however late the
                # endpoint asks for it (the time it took is the endpoint's, not the client's).
                message = await asyncio.wait_for(receive(), timeout=max(waits[why], _FLOOR_S))
            except TimeoutError:
                elapsed_s = time.monotonic() - started
                raise UploadTimeout(self._why(why, received, elapsed_s)) from None
            received += len(message.get("body", b""))
            if message["type"] != "http.request" or not message.get("more_body", False):
                body_done = True
                return message
            elapsed_s = time.monotonic() - started
            if elapsed_s > self.total_timeout_s:
                raise UploadTimeout(self._why("total", received, elapsed_s))
            if self._behind(received, elapsed_s):
                raise UploadTimeout(self._why("rate", received, elapsed_s))
            return message

        await self.app(scope, timed_receive, send)

    def _behind(self, received: int, elapsed_s: float) -> bool:
        """Whether `received` bytes after `elapsed_s` fall behind the minimum rate."""
        late_s = elapsed_s - self.idle_timeout_s
        return bool(self.min_bytes_per_s) and received < self.min_bytes_per_s * late_s

    def _why(self, why: str, received: int, elapsed_s: float) -> str:
        if why == "total":
            return "Request body not received within server.upload_timeout_s"
        if why == "rate":
            return (
                f"Request body too slow: {received} bytes in {elapsed_s:.0f} s, under "
                f"{self.min_bytes_per_s:g} bytes/s (server.upload_min_bytes_per_s)"
            )
        return (
            f"Request body stalled: no bytes for {self.idle_timeout_s:g} s "
            "(server.upload_idle_timeout_s)"
        )
