"""Access control: optional API keys, checked by a pure ASGI middleware before any route runs."""

from __future__ import annotations

import hmac
import json
import logging
from collections.abc import Iterable, Mapping
from pathlib import Path

from starlette.types import ASGIApp, Receive, Scope, Send

from serving.config import AuthConfig
from serving.errors import ConfigError
from serving.http import paddlex_api, request_id
from serving.http.exceptions import native_body

logger = logging.getLogger(__name__)

PROBE_PATHS = frozenset(("/livez", "/readyz", "/health"))
"""Never need a key: orchestrators probe them without credentials."""
METRICS_PATH = "/metrics"
PADDLEX_PATHS = frozenset(("/ocr",))
"""Answered in PaddleX's envelope (`errorCode` 401) rather than `{"error": ...}`."""


def load_api_keys(config: AuthConfig, environ: Mapping[str, str]) -> tuple[bytes, ...]:
    """The configured keys: those in the `config.api_keys_env` variable (comma-separated) and
    in the `config.api_keys_file` file (one a line; blank lines and `#` comments skipped).

    Raises:
        ConfigError: the key file cannot be read.
    """
    keys: list[str] = []
    if config.api_keys_env:
        keys += environ.get(config.api_keys_env, "").split(",")
    if config.api_keys_file:
        try:
            text = Path(config.api_keys_file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            raise ConfigError("auth.api_keys_file", f"cannot read the key file: {err}") from err
        keys += [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    unique = dict.fromkeys(key.strip() for key in keys if key.strip())
    return tuple(key.encode("utf-8") for key in unique)


def key_matches(sent: bytes, keys: Iterable[bytes]) -> bool:
    """Whether `sent` is one of `keys`, comparing against every key in constant time each."""
    found = False
    for key in keys:
        found |= hmac.compare_digest(sent, key)  # no short circuit: every key is compared
    return found


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
    (and `/metrics` unless `protect_metrics`). With no keys it passes everything through."""

    def __init__(self, app: ASGIApp, *, keys: tuple[bytes, ...], protect_metrics: bool) -> None:
        self.app = app
        self.keys = keys
        self.exempt = PROBE_PATHS if protect_metrics else PROBE_PATHS | {METRICS_PATH}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.keys or scope["path"] in self.exempt:
            await self.app(scope, receive, send)
            return
        sent = sent_key(scope["headers"])
        if sent is not None and key_matches(sent, self.keys):
            await self.app(scope, receive, send)
            return
        reason = "missing" if sent is None else "invalid"
        logger.warning("refused %s %s: API key %s", scope["method"], scope["path"], reason)
        await _unauthorized(scope["path"], reason, send)


async def _unauthorized(path: str, reason: str, send: Send) -> None:
    message = f"API key {reason}: send it in the X-API-Key header or as Authorization: Bearer KEY"
    rid = request_id.current_or_new()
    if path in PADDLEX_PATHS:
        body = paddlex_api.envelope(rid, status=401, message=message)
    else:
        body = native_body("unauthorized", message, rid)
    payload = json.dumps(body).encode("utf-8")
    await send(
        {
            "type": "http.response.start",
            "status": 401,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode("ascii")),
                (b"www-authenticate", b'Bearer realm="ocr"'),
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})
