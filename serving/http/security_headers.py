"""Response headers that keep browsers from misreading or framing what the server sends.

Every answer (API JSON, errors, the web page at `/`, `/docs` and their static files) carries:

- `Content-Security-Policy`: the pages load only this server's own scripts and styles, fetch
  only from it, and show images from it or from `blob:` URLs (the try-it page draws an uploaded
  image from the file itself, and a PDF page from the PNG `/v1/render` returns, both through
  `URL.createObjectURL`). No inline script or style, no plugins, no `<base>`, no form posts;
  `frame-ancestors 'none'` forbids framing (clickjacking).
- `X-Content-Type-Options: nosniff`: a JSON answer or an uploaded name echoed in one is never run
  as script or style.
- `X-Frame-Options: DENY`: `frame-ancestors` for browsers that predate it.
- `Referrer-Policy: no-referrer`, `Cross-Origin-Opener-Policy: same-origin`.

A header a route sets itself is left as it is. Uvicorn's `Server` header is switched off where the
server is configured (`serving/cli.py`: `server_header=False`).
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

CONTENT_SECURITY_POLICY = "; ".join(
    (
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' blob:",
        "connect-src 'self'",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors 'none'",
    )
)
"""What the web page (`serving/http/static`) really loads, and nothing more."""

HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode("ascii")),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"cross-origin-opener-policy", b"same-origin"),
)


class SecurityHeadersMiddleware:
    """Pure ASGI middleware adding `HEADERS` to every HTTP response that lacks them."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", ()))
                present = {name.lower() for name, _ in headers}
                headers += [(name, value) for name, value in HEADERS if name not in present]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)
