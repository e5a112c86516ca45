"""What every endpoint shares: the runtime it serves, its metrics, and giving up on work when the
client goes away."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from starlette.requests import Request
from starlette.responses import Response

from serving.errors import ClientGone
from serving.runtime import Runtime

logger = logging.getLogger(__name__)

T = TypeVar("T")
Handler = Callable[[Request], Awaitable[Response]]


def runtime_of(request: Request) -> Runtime:
    """The runtime the app serves (`build_app` puts it in the app's state)."""
    runtime: Runtime = request.app.state.runtime
    return runtime


def observed(endpoint: str, handler: Handler) -> Handler:
    """Count and time an endpoint's answers in `ocr_requests_total` and `ocr_request_seconds`."""

    async def wrapper(request: Request) -> Response:
        metrics = runtime_of(request).metrics
        started = time.monotonic()
        response = await handler(request)
        metrics.request_seconds.labels(endpoint=endpoint).observe(time.monotonic() - started)
        metrics.requests.labels(endpoint=endpoint, status=str(response.status_code)).inc()
        return response

    return wrapper


async def until_disconnect(request: Request, work: Coroutine[Any, Any, T]) -> T:
    """Await `work`, cancelling it (and so its queued items) if the client goes away."""
    task = asyncio.ensure_future(work)

    async def watch() -> None:
        while True:
            message = await request.receive()
            if message["type"] == "http.disconnect":
                return

    watcher = asyncio.ensure_future(watch())
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
    if not task.done():
        task.cancel()
        logger.info("client went away; request cancelled")
        raise ClientGone()
    return task.result()
