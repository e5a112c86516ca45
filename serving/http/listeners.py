"""Which listener a request came on, and how many API requests run at once.

The probes (`/livez`, `/readyz`, `/health`) are answered whatever the API's load: they are never
counted against `server.limit_concurrency`, and with `server.health_port` they have a listener of
their own, which answers nothing else (404), so that the kubelet's and the container's health
checks reach the server while the API port's connections are all taken.

Every other request counts against `server.limit_concurrency` while it runs (uvicorn counted idle
sockets too: `serving.http.connections`); past it, 503 `overloaded` with `Retry-After`, in the
endpoint's own error format.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from serving.http.exceptions import send_refusal
from serving.scheduling.retry_after import retry_after_s

PROBES = frozenset(("/livez", "/readyz", "/health"))


class ListenerMiddleware:
    """Pure ASGI middleware: the health listener's routes, and the API's requests at once."""

    def __init__(
        self, app: ASGIApp, *, max_requests: int, health_port: int, retry_after_s: int
    ) -> None:
        self.app = app
        self.max_requests = max_requests
        self.health_port = health_port
        self.retry_after_s = retry_after_s
        self.running = 0
        """API requests running now (`/readyz` shows it)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        local = scope.get("server")
        if self.health_port and local is not None and local[1] == self.health_port:
            if path in PROBES:
                await self.app(scope, receive, send)
            else:
                await send_refusal(
                    send, path, 404, "not_found", "This port answers /livez, /readyz and /health"
                )
            return
        if path in PROBES or not self.max_requests:
            await self.app(scope, receive, send)
            return
        if self.running >= self.max_requests:
            await send_refusal(
                send,
                path,
                503,
                "overloaded",
                f"Too many requests at once ({self.max_requests}, server.limit_concurrency); "
                "retry after Retry-After",
                headers=[(b"retry-after", str(retry_after_s(self.retry_after_s)).encode())],
            )
            return
        self.running += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.running -= 1
