"""A job's webhook, sent as the Standard Webhooks specification says (standardwebhooks.com):
a POST of the event's JSON with `webhook-id` (the delivery's id, the same at every attempt),
`webhook-timestamp` (this attempt's, in seconds) and `webhook-signature` (`v1,` and the base64 of
the HMAC-SHA256 of `id.timestamp.body` under the key's secret). Only a 2xx answer delivers it;
a redirect is not followed; `410 Gone` means the receiver wants no more; any other answer, a
timeout or a refused connection is tried again later (`serving.jobs.retries`)."""

from __future__ import annotations

import asyncio
import base64
import email.utils
import hashlib
import hmac
import logging
import math
import time
from dataclasses import dataclass

import httpx

from serving.errors import OcrError
from serving.jobs.destinations import DestinationPolicy, connect_target

logger = logging.getLogger(__name__)

USER_AGENT = "ocr-serving-webhooks/1"


@dataclass(frozen=True, slots=True, kw_only=True)
class SendResult:
    """How one attempt went."""

    ok: bool
    permanent: bool = False
    """No later attempt can succeed (410 Gone, a destination now refused)."""
    status_code: int | None = None
    error: str | None = None
    retry_after_s: float | None = None
    """The receiver's `Retry-After`, in seconds."""


def sign(secret: bytes, msg_id: str, timestamp: int, body: bytes) -> str:
    """The `webhook-signature` value: `v1,` and the base64 HMAC-SHA256 of `id.timestamp.body`."""
    digest = hmac.new(secret, f"{msg_id}.{timestamp}.".encode() + body, hashlib.sha256).digest()
    return f"v1,{base64.b64encode(digest).decode('ascii')}"


def signed_headers(secret: bytes, msg_id: str, body: bytes, *, now: float) -> dict[str, str]:
    """The headers of one attempt at `now` (wall clock)."""
    timestamp = math.floor(now)
    return {
        "content-type": "application/json",
        "user-agent": USER_AGENT,
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": sign(secret, msg_id, timestamp, body),
    }


async def send(
    url: str,
    msg_id: str,
    body: bytes,
    *,
    secret: bytes,
    policy: DestinationPolicy,
    timeout_s: float,
    transport: httpx.AsyncBaseTransport | None = None,
) -> SendResult:
    """POST one signed attempt to `url`; never raises for what the receiver or the network did."""
    try:
        target, host = await connect_target(url, policy, "callback_url")
    except OcrError as err:
        return SendResult(ok=False, permanent=True, error=err.message)
    headers = {**signed_headers(secret, msg_id, body, now=time.time()), "host": host}
    # The answer's body is not read: a receiver cannot make us hold one.
    try:
        async with (
            asyncio.timeout(timeout_s),  # the whole attempt: a receiver trickling its answer too
            httpx.AsyncClient(
                follow_redirects=False, timeout=timeout_s, transport=transport, trust_env=False
            ) as client,
            client.stream("POST", target, content=body, headers=headers) as answer,
        ):
            status = answer.status_code
            retry_after = _retry_after_s(answer.headers.get("retry-after"))
    except (TimeoutError, httpx.TimeoutException):
        return SendResult(ok=False, error=f"no answer within {timeout_s:g} s (webhooks.timeout_s)")
    except httpx.HTTPError as err:
        return SendResult(ok=False, error=f"cannot reach the receiver ({type(err).__name__})")
    if 200 <= status < 300:
        return SendResult(ok=True, status_code=status)
    if status == 410:
        return SendResult(
            ok=False, permanent=True, status_code=status, error="410 Gone: no more attempts"
        )
    reason = "a redirect (not followed)" if 300 <= status < 400 else f"HTTP {status}"
    return SendResult(
        ok=False,
        status_code=status,
        error=f"the receiver answered {reason}",
        retry_after_s=retry_after,
    )


def _retry_after_s(value: str | None) -> float | None:
    """`Retry-After` in seconds (a number, or an HTTP date); None when absent or unreadable."""
    if not value:
        return None
    if value.strip().isdigit():
        return float(value.strip())
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())
