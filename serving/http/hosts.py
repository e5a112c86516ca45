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

A page on another site can also send, without reading the answer, a form-like POST to
`http://127.0.0.1:8000/v1/jobs` (a "simple" request needs no CORS preflight): its `Host` is an IP,
but its `Origin` names the other site. So a request whose `Origin` is neither this server's own
(the same host and port as `Host`: the web page at `/`) nor one of `server.cors_origins` gets 403
`cross_origin_refused`. Clients other than browsers send no `Origin`.

With API keys on, the key was the only check (issue 49, item 10), yet the web page works with
keys only behind a proxy that adds the key, and such a proxy lends the key to whatever page gets
a browser to call it: a cross-site POST, or DNS rebinding onto the proxy's address. So with keys
on the `Origin` check applies the same way, and the `Host` check too once `server.allowed_hosts`
names the hosts the server (or its proxy) is reached by; left empty, keyed servers reached by
any name (a Kubernetes Service, an ingress) keep working unchanged.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Iterable

from starlette.types import ASGIApp, Receive, Scope, Send

from serving.http.exceptions import send_refusal

logger = logging.getLogger(__name__)

CODE = "host_not_allowed"
CROSS_ORIGIN_CODE = "cross_origin_refused"
_DEFAULT_PORTS = {"http": "80", "https": "443"}


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


def origin_allowed(origin: str, host: str, cors_origins: Iterable[str]) -> bool:
    """Whether a browser request from `origin` (its `Origin` header) to `host` is answered while
    API keys are off: the server's own origin (same host and port), or a configured CORS one."""
    if origin in cors_origins or "*" in cors_origins:
        return True
    scheme, _, netloc = origin.strip().lower().partition("://")
    default = _DEFAULT_PORTS.get(scheme)
    if default is None or not netloc:
        return False  # "null" (a sandboxed or file: page)
    return _with_port(netloc, default) == _with_port(host.strip().lower(), default)


def _with_port(netloc: str, default: str) -> str:
    if netloc.endswith("]") or ":" not in netloc:
        return f"{netloc}:{default}"
    return netloc


class HostCheckMiddleware:
    """Pure ASGI middleware: an HTTP request whose `Host` `host_allowed` refuses gets 400 JSON,
    one whose `Origin` `origin_allowed` refuses 403 JSON (PaddleX's envelope on `/ocr`), before
    any route runs."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        allowed_hosts: tuple[str, ...],
        cors_origins: tuple[str, ...] = (),
        keys_on: bool = False,
    ) -> None:
        self.app = app
        self.allowed_hosts = allowed_hosts
        self.cors_origins = cors_origins
        self.keys_on = keys_on
        """With keys on: `Host` checked only when `allowed_hosts` names some."""
        self._keys = "on" if keys_on else "off"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        host = origin = None
        for name, value in scope["headers"]:
            if name == b"host":
                host = value.decode("latin-1")
            elif name == b"origin":
                origin = value.decode("latin-1")
        method, path = scope["method"], scope["path"]
        check_host = not self.keys_on or bool(self.allowed_hosts)
        if check_host and host is not None and not host_allowed(host, self.allowed_hosts):
            logger.warning("refused %s %s: Host %r is not allowed", method, path, host)
            message = (
                f"Host {_shown(host)} is not allowed: with API keys {self._keys}, only IP "
                "addresses, localhost and the names in server.allowed_hosts are answered (DNS "
                "rebinding)"
            )
            await send_refusal(send, path, 400, CODE, message)
            return
        if origin is not None and not origin_allowed(origin, host or "", self.cors_origins):
            logger.warning("refused %s %s: Origin %r is another site's", method, path, origin)
            message = (
                f"Origin {_shown(origin)} is refused: with API keys {self._keys}, browsers may "
                "call this server only from its own pages and server.cors_origins"
            )
            await send_refusal(send, path, 403, CROSS_ORIGIN_CODE, message)
            return
        await self.app(scope, receive, send)


def _shown(value: str) -> str:
    return repr(value if len(value) <= 100 else value[:100] + "...")
