"""The jobs API refused to anyone on the network while API keys are off, unless asked for.

The jobs store keeps every submitted document and its text until retention deletes it, and with
keys off anyone who reaches the port may list, read and delete all of it. On a loopback bind
that is the operator's own machine. On any other bind (the image's 0.0.0.0, which `docker run -p`
publishes to the LAN) it is everyone on the network (issue 37, item 8). So with keys off and a
bind that is not loopback, `/v1/jobs` answers 403 `open_store_refused` naming `auth.open`, and
the start-up log says so; `auth.open = true` serves it anyway (a trusted network, or a port
published on 127.0.0.1 only). `/ocr`, `/v1/ocr` and `/v1/render` keep nothing and are served.
"""

from __future__ import annotations

import ipaddress
import logging

from starlette.types import ASGIApp, Receive, Scope, Send

from serving.http.exceptions import send_refusal

logger = logging.getLogger(__name__)

CODE = "open_store_refused"
JOBS_PREFIX = "/v1/jobs"
MESSAGE = (
    "the jobs API is off: API keys are off and the server listens beyond loopback, so anyone on "
    "the network could read and delete every stored document; configure API keys "
    "(OCR_API_KEYS or auth.keys_file), or set auth.open = true (OCR_AUTH__OPEN=true) to serve it "
    "without keys"
)


def is_loopback_bind(host: str) -> bool:
    """Whether a bind address reaches this machine only: `localhost`, 127.0.0.0/8 or ::1."""
    name = host.strip().strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False  # a name: it may resolve to any interface


def store_refused(host: str, *, open_access: bool) -> bool:
    """Whether a keyless server bound to `host` must refuse the jobs API."""
    return not open_access and not is_loopback_bind(host)


class OpenStoreGuard:
    """Pure ASGI middleware: requests under `/v1/jobs` get 403 `open_store_refused`; the rest
    pass. Installed only when `store_refused` says so (keys off, a bind beyond loopback)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if path == JOBS_PREFIX or path.startswith(JOBS_PREFIX + "/"):
            await send_refusal(send, path, 403, CODE, MESSAGE)
            return
        await self.app(scope, receive, send)
