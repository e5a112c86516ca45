"""The Host check that stands in for API keys when they are off: no DNS rebinding.

With no key to present, the API answers whoever reaches its port. A web page on another site
cannot read those answers (no CORS), except by DNS rebinding: the attacker's name first resolves
to the attacker's server, which serves a script, then to this server's address (127.0.0.1, or a
LAN address a `docker run -p` publishes), and the browser, seeing one origin, lets the script
call `/v1/jobs` and read the answers. Every such request carries the attacker's name in `Host`.

So, with keys off, a request is answered only when its `Host` names this server in a way no
attacker's page can: an IP literal (`127.0.0.1:8000`, `[::1]`, a pod's or a host's address: the
page's origin would then be that address itself, not the attacker's), `localhost` or a
`*.localhost` name (browsers resolve those to loopback themselves), or a name listed in
`server.allowed_hosts` (exact, `*.example.com` for its subdomains, or `*` for any, which turns the
check off). Other names get 400 `host_not_allowed`. A request with no `Host` at all (HTTP/1.0)
comes from no browser and passes. Kubernetes probes (`Host` is the pod's IP), the Docker
HEALTHCHECK (127.0.0.1) and `docker run -p` used as `localhost:8000` pass as they are; clients
that use a DNS name (a Service's name, an ingress host) need it listed, or keys on.
"""

from __future__ import annotations

import ipaddress
import json
import logging
from collections.abc import Iterable

from starlette.types import ASGIApp, Receive, Scope, Send

from serving.http import paddlex_api, request_id
from serving.http.exceptions import native_body

logger = logging.getLogger(__name__)

CODE = "host_not_allowed"
_PADDLEX_PATHS = frozenset(("/ocr",))
"""Answered in PaddleX's envelope (`errorCode` 400) rather than `{"error": ...}`."""


def host_name(header: str) -> str:
    """The name or address in a `Host` header: port, brackets and a trailing dot removed,
    lower case."""
    value = header.strip().lower()
    if value.startswith("["):
        return value[1:].partition("]")[0]
    return value.rpartition(":")[0] if ":" in value else value.rstrip(".")


def is_ip_literal(name: str) -> bool:
    """Whether `name` is an IPv4 or IPv6 address as written in a URL's host."""
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def host_allowed(header: str, allowed: Iterable[str]) -> bool:
    """Whether a request with this `Host` header is answered while API keys are off."""
    name = host_name(header).rstrip(".")
    if is_ip_literal(name) or name == "localhost" or name.endswith(".localhost"):
        return True
    for pattern in allowed:
        pattern = pattern.lower()
        if pattern == "*" or pattern == name:
            return True
        if pattern.startswith("*.") and name.endswith(pattern[1:]) and len(name) > len(pattern):
            return True
    return False


class HostCheckMiddleware:
    """Pure ASGI middleware: an HTTP request whose `Host` `host_allowed` refuses gets 400 JSON
    (PaddleX's envelope on `/ocr`) before any route runs."""

    def __init__(self, app: ASGIApp, *, allowed_hosts: tuple[str, ...]) -> None:
        self.app = app
        self.allowed_hosts = allowed_hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        host = None
        for name, value in scope["headers"]:
            if name == b"host":
                host = value.decode("latin-1")
                break
        if host is None or host_allowed(host, self.allowed_hosts):
            await self.app(scope, receive, send)
            return
        logger.warning(
            "refused %s %s: Host %r is not allowed", scope["method"], scope["path"], host
        )
        await _refuse(scope["path"], host, send)


async def _refuse(path: str, host: str, send: Send) -> None:
    shown = host if len(host) <= 100 else host[:100] + "..."
    message = (
        f"Host {shown!r} is not allowed: with API keys off, only IP addresses, localhost and "
        "the names in server.allowed_hosts are answered (DNS rebinding protection)"
    )
    rid = request_id.current_or_new()
    if path in _PADDLEX_PATHS:
        body = paddlex_api.envelope(rid, status=400, message=message)
    else:
        body = native_body(CODE, message, rid)
    payload = json.dumps(body).encode("utf-8")
    await send(
        {
            "type": "http.response.start",
            "status": 400,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode("ascii")),
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})
