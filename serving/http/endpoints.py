"""What every endpoint shares: the narrow services it is given (each endpoint reads only what it
uses: `build_app` puts them in the app's state), its metrics, and giving up on work when the client
goes away."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import math
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from starlette.requests import Request
from starlette.responses import Response

from serving.config import AppConfig
from serving.errors import ClientGone, ValidationFailed
from serving.metrics import Metrics
from serving.scheduling.memory_budget import MemoryBudget
from serving.service.requests import JobRequests, OcrRequests, Readiness, Renderer

logger = logging.getLogger(__name__)

T = TypeVar("T")
Handler = Callable[[Request], Awaitable[Response]]


def config_of(request: Request) -> AppConfig:
    """The server's configuration."""
    config: AppConfig = request.app.state.services.config
    return config


def metrics_of(request: Request) -> Metrics:
    """The server's metrics."""
    metrics: Metrics = request.app.state.services.metrics
    return metrics


def budget_of(request: Request) -> MemoryBudget:
    """The memory budget request bodies and pages are charged to."""
    budget: MemoryBudget = request.app.state.services.budget
    return budget


def readiness_of(request: Request) -> Readiness:
    """Whether the server is ready, and the state of its parts (`/readyz`)."""
    readiness: Readiness = request.app.state.services.readiness
    return readiness


def ocr_of(request: Request) -> OcrRequests:
    """What the OCR endpoints run a document with."""
    ocr: OcrRequests = request.app.state.services.ocr
    return ocr


def renderer_of(request: Request) -> Renderer:
    """What renders a document answer (text, hOCR, ALTO, PDF)."""
    renderer: Renderer = request.app.state.services.renderer
    return renderer


def jobs_of(request: Request) -> JobRequests:
    """What the jobs' endpoints use."""
    jobs: JobRequests = request.app.state.services.jobs
    return jobs


def from_loopback(request: Request) -> bool:
    """Whether the client's address is a loopback one (127.0.0.0/8, ::1, or ::ffff:127.x).

    Uvicorn replaces the address with `X-Forwarded-For`'s when the connection comes from
    127.0.0.1 (its `forwarded_allow_ips`), so a reverse proxy on the machine that sets the header
    does not make its clients loopback ones; one that does not set it does.
    """
    if request.client is None:
        return False
    try:
        address = ipaddress.ip_address(request.client.host)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback


TIMEOUT_HEADER = "X-Request-Timeout"
"""A client's own deadline, in seconds, for one OCR request (as Triton's per-request `timeout`)."""


def timeout_of(request: Request, limit_s: float) -> float:
    """The request's deadline in seconds: the client's `X-Request-Timeout`, at most `limit_s`
    (`server.request_timeout_s`), or `limit_s`. Admission sheds at once (503) a request whose
    pages would finish after it at the server's measured pace.

    Raises:
        ValidationFailed: the header is not a positive number of seconds.
    """
    raw = request.headers.get(TIMEOUT_HEADER)
    if raw is None:
        return limit_s
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise ValidationFailed(f"{TIMEOUT_HEADER} must be a positive number of seconds")
    return min(value, limit_s)


def observed(endpoint: str, handler: Handler) -> Handler:
    """Count and time an endpoint's answers in `ocr_requests_total` and `ocr_request_seconds`."""

    async def wrapper(request: Request) -> Response:
        metrics = metrics_of(request)
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
