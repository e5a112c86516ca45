"""The upload-timeout middleware on a bare ASGI app: which waits it times and what it raises."""

from __future__ import annotations

import asyncio

import pytest
from starlette.types import Message, Receive, Scope, Send

from serving.errors import UploadTimeout
from serving.http.upload_timeout import UploadTimeoutMiddleware

BODY = [(b"content-length", b"100000")]
"""A request that announces a body (one without is not timed)."""


def _reader(messages_wanted: int) -> tuple[list[Message], object]:
    got: list[Message] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        for _ in range(messages_wanted):
            got.append(await receive())

    return got, app


def _run(app: object, receive: Receive, *, idle_s: float, total_s: float) -> None:
    middleware = UploadTimeoutMiddleware(
        app,  # type: ignore[arg-type]
        idle_timeout_s=idle_s,
        total_timeout_s=total_s,
    )

    async def send(message: Message) -> None:
        pass

    asyncio.run(middleware({"type": "http", "headers": BODY}, receive, send))  # type: ignore[arg-type]


def test_stalled_body_raises_upload_timeout() -> None:
    got, app = _reader(2)
    first = {"type": "http.request", "body": b"x", "more_body": True}

    async def receive() -> Message:
        if not got:
            return first
        await asyncio.Event().wait()  # never sends the rest
        raise AssertionError

    with pytest.raises(UploadTimeout, match="upload_idle_timeout_s"):
        _run(app, receive, idle_s=0.05, total_s=60)
    assert got == [first]


def test_total_timeout_when_chunks_keep_coming_slowly() -> None:
    got, app = _reader(1000)

    async def receive() -> Message:
        await asyncio.sleep(0.02)
        return {"type": "http.request", "body": b"x", "more_body": True}

    with pytest.raises(UploadTimeout, match="upload_timeout_s"):
        _run(app, receive, idle_s=1.0, total_s=0.2)
    assert 3 <= len(got) < 1000


def test_waits_after_the_last_chunk_are_not_timed() -> None:
    """Endpoints wait for `http.disconnect` while the work runs; that wait has no limit."""
    got, app = _reader(2)

    async def receive() -> Message:
        if not got:
            return {"type": "http.request", "body": b"all", "more_body": False}
        await asyncio.sleep(0.2)
        return {"type": "http.disconnect"}

    _run(app, receive, idle_s=0.05, total_s=0.1)
    assert [m["type"] for m in got] == ["http.request", "http.disconnect"]


def test_non_http_scopes_pass_through() -> None:
    seen: list[str] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        seen.append(scope["type"])
        await receive()

    async def receive() -> Message:
        await asyncio.sleep(0.1)
        return {"type": "lifespan.startup"}

    middleware = UploadTimeoutMiddleware(app, idle_timeout_s=0.01, total_timeout_s=0.01)

    async def send(message: Message) -> None:
        pass

    asyncio.run(middleware({"type": "lifespan"}, receive, send))
    assert seen == ["lifespan"]


def test_a_body_under_the_minimum_rate_raises_upload_timeout() -> None:
    """A byte every 20 ms (50 B/s) never stalls for the 0.2 s idle timeout, but falls behind
    1000 B/s once the 0.2 s grace has passed (issue 49)."""
    got, app = _reader(1000)

    async def receive() -> Message:
        await asyncio.sleep(0.02)
        return {"type": "http.request", "body": b"x", "more_body": True}

    middleware = UploadTimeoutMiddleware(
        app,  # type: ignore[arg-type]
        idle_timeout_s=0.2,
        total_timeout_s=60,
        min_bytes_per_s=1000,
    )

    async def send(message: Message) -> None:
        pass

    with pytest.raises(UploadTimeout, match=r"upload_min_bytes_per_s"):
        asyncio.run(middleware({"type": "http", "headers": BODY}, receive, send))  # type: ignore[arg-type]
    assert 5 <= len(got) < 40


def test_a_request_without_a_body_is_not_timed_however_late_it_reads() -> None:
    """A GET's handler may first work for longer than the grace (a document rendered), then ask
    for its (empty) body: it used to get 408 for a body 'too slow'."""
    got, app = _reader(1)

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def late(scope: Scope, receive: Receive, send: Send) -> None:
        await asyncio.sleep(0.3)
        await app(scope, receive, send)  # type: ignore[operator]

    middleware = UploadTimeoutMiddleware(
        late, idle_timeout_s=0.1, total_timeout_s=0.2, min_bytes_per_s=1000
    )

    async def send(message: Message) -> None:
        pass

    for scope in ({"type": "http", "headers": []}, {"type": "http", "headers": BODY}):
        got.clear()
        asyncio.run(middleware(scope, receive, send))  # type: ignore[arg-type]
        assert got == [{"type": "http.request", "body": b"", "more_body": False}]
