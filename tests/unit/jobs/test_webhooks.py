"""serving/jobs/webhooks.py: the signature, checked by the Standard Webhooks reference library
(`standardwebhooks`, an implementation of its own), and how each answer of a receiver is taken
(the receivers here are httpx mock transports; tests/e2e/test_job_callbacks.py has a real one)."""

from __future__ import annotations

import base64
import time

import httpx
import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from serving.jobs.destinations import DestinationPolicy
from serving.jobs.webhooks import send, sign, signed_headers

pytestmark = pytest.mark.anyio

SECRET = b"0123456789abcdef01234567"
WHSEC = "whsec_" + base64.b64encode(SECRET).decode()
LOCAL = DestinationPolicy(allowed_hosts=("127.0.0.1",), allow_private=True, setting="test")
BODY = b'{"type":"job.succeeded","timestamp":"2026-12-07T00:00:00.000Z","data":{"id":"a"}}'


def test_the_reference_library_verifies_our_signature() -> None:
    headers = signed_headers(SECRET, "msg_1", BODY, now=time.time())
    assert Webhook(WHSEC).verify(BODY, headers) == {
        "type": "job.succeeded",
        "timestamp": "2026-12-07T00:00:00.000Z",
        "data": {"id": "a"},
    }
    with pytest.raises(WebhookVerificationError):
        Webhook(WHSEC).verify(BODY + b" ", headers)  # the body changed
    with pytest.raises(WebhookVerificationError):
        Webhook(WHSEC).verify(BODY, {**headers, "webhook-id": "msg_2"})  # the id is signed


def test_the_signature_is_the_specifications_example_shape() -> None:
    value = sign(SECRET, "msg_1", 1674087231, BODY)
    scheme, digest = value.split(",")
    assert scheme == "v1"
    assert len(base64.b64decode(digest)) == 32  # HMAC-SHA256
    assert Webhook(WHSEC).sign("msg_1", _at(1674087231), BODY) == value


async def test_a_2xx_delivers_and_sends_the_signed_body() -> None:
    seen: list[httpx.Request] = []

    def receive(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(204)

    result = await _send(receive)
    assert (result.ok, result.status_code) == (True, 204)
    (request,) = seen
    assert request.content == BODY
    assert request.headers["content-type"] == "application/json"
    Webhook(WHSEC).verify(request.content, dict(request.headers))


@pytest.mark.parametrize(
    ("status", "permanent", "says"),
    [
        (500, False, "HTTP 500"),
        (302, False, "redirect (not followed)"),
        (410, True, "410 Gone"),
        (401, False, "HTTP 401"),
    ],
)
async def test_other_answers_fail_and_only_gone_is_final(
    status: int, permanent: bool, says: str
) -> None:
    result = await _send(lambda _: httpx.Response(status, headers={"location": "/elsewhere"}))
    assert (result.ok, result.permanent, result.status_code) == (False, permanent, status)
    assert result.error is not None
    assert says in result.error


async def test_retry_after_is_read_in_seconds() -> None:
    result = await _send(lambda _: httpx.Response(429, headers={"retry-after": "120"}))
    assert result.retry_after_s == 120.0


async def test_an_unreachable_receiver_fails_without_raising() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    result = await _send(refuse)
    assert not result.ok
    assert not result.permanent
    assert result.error == "cannot reach the receiver (ConnectError)"


async def test_a_host_the_policy_refuses_is_a_final_failure() -> None:
    closed = DestinationPolicy(allowed_hosts=("127.0.0.1",), allow_private=False, setting="x")
    result = await send(
        "http://127.0.0.1:9/hook", "msg_1", BODY, secret=SECRET, policy=closed, timeout_s=1
    )
    assert (result.ok, result.permanent) == (False, True)
    assert result.error is not None
    assert "loopback" in result.error


async def _send(handler):  # type: ignore[no-untyped-def]
    return await send(
        "http://127.0.0.1:9/hook",
        "msg_1",
        BODY,
        secret=SECRET,
        policy=LOCAL,
        timeout_s=5,
        transport=httpx.MockTransport(handler),
    )


def _at(seconds: int):  # type: ignore[no-untyped-def]
    from datetime import UTC, datetime

    return datetime.fromtimestamp(seconds, UTC)
